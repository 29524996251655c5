"""Byte streams for logs, exec and volume snapshots, built on anyio's stream ABCs.

Adapters hand hosts :class:`anyio.abc.ByteReceiveStream` objects (iterate them
with ``async for chunk in stream``); these helpers make such streams from
memory or from an async iterator, and read them whole.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterable, AsyncIterator

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = [
    "BytesReceiveStream",
    "IteratorByteStream",
    "MemoryByteReceiveStream",
    "MemoryByteSendStream",
    "byte_stream_pair",
    "read_all",
]


class BytesReceiveStream(ByteReceiveStream):
    """A receive stream over bytes already in memory, served in chunks."""

    def __init__(self, data: bytes, chunk_size: int = 65536) -> None:
        self._view = memoryview(data)
        self._offset = 0
        self._chunk_size = chunk_size
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
        await anyio.lowlevel.checkpoint()
        if self._offset >= len(self._view):
            raise anyio.EndOfStream
        size = min(max_bytes, self._chunk_size)
        chunk = bytes(self._view[self._offset : self._offset + size])
        self._offset += len(chunk)
        return chunk

    async def aclose(self) -> None:
        self._closed = True


class IteratorByteStream(ByteReceiveStream):
    """A receive stream over an async iterator of byte chunks (closed with it)."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._pending:
            try:
                self._pending = await self._chunks.__anext__()
            except StopAsyncIteration:
                raise anyio.EndOfStream from None
        chunk, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()


class MemoryByteSendStream(ByteSendStream):
    """The writing end of :func:`byte_stream_pair`; closing it ends the reader's stream."""

    def __init__(self, inner: MemoryObjectSendStream[bytes]) -> None:
        self._inner = inner

    async def send(self, item: bytes) -> None:
        if item:
            await self._inner.send(bytes(item))

    async def aclose(self) -> None:
        await self._inner.aclose()


class MemoryByteReceiveStream(ByteReceiveStream):
    """The reading end of :func:`byte_stream_pair`."""

    def __init__(self, inner: MemoryObjectReceiveStream[bytes]) -> None:
        self._inner = inner
        self._pending = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._pending:
            self._pending = await self._inner.receive()
        chunk, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def byte_stream_pair(
    max_buffered_chunks: float = math.inf,
) -> tuple[MemoryByteSendStream, MemoryByteReceiveStream]:
    """A connected in-memory pair: bytes sent on one end are received on the other."""
    send, receive = anyio.create_memory_object_stream[bytes](max_buffered_chunks)
    return MemoryByteSendStream(send), MemoryByteReceiveStream(receive)


async def read_all(stream: ByteReceiveStream | AsyncIterable[bytes], limit: int = -1) -> bytes:
    """Read a stream to its end (or until ``limit`` bytes, when not negative)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in stream:
        parts.append(chunk)
        size += len(chunk)
        if 0 <= limit <= size:
            break
    data = b"".join(parts)
    return data if limit < 0 else data[:limit]
