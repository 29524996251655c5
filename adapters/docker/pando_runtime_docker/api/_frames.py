"""The Engine's multiplexed stream format: 8-byte frame headers, stdout and stderr apart.

Without a TTY, logs and attached or exec'd output arrive as frames: one byte naming the
stream (0 stdin, 1 stdout, 2 stderr), three zero bytes, a big-endian 32-bit length, then
that many bytes. Before API 1.42 this holds whatever the content type says, so the adapter
decides from the TTY alone.
"""

from __future__ import annotations

import enum
import struct

__all__ = ["FrameDecoder", "StreamKind"]

_HEADER = struct.Struct(">BxxxL")


class StreamKind(enum.IntEnum):
    """Which standard stream a frame belongs to."""

    STDIN = 0
    STDOUT = 1
    STDERR = 2


class FrameDecoder:
    """Splits a multiplexed byte stream into ``(stream, payload)`` pieces, chunk by chunk.

    Chunks may end anywhere, inside a header or a payload: the decoder keeps what it has
    not yet placed and hands out payload bytes as soon as they arrive.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._kind = StreamKind.STDOUT
        self._left = 0

    def feed(self, chunk: bytes) -> list[tuple[StreamKind, bytes]]:
        """Every piece of payload ``chunk`` completes, in order (empty pieces left out)."""
        self._buffer += chunk
        pieces: list[tuple[StreamKind, bytes]] = []
        while self._buffer:
            if self._left == 0:
                if len(self._buffer) < _HEADER.size:
                    break
                kind, length = _HEADER.unpack_from(self._buffer)
                del self._buffer[: _HEADER.size]
                self._kind = StreamKind(kind) if kind in (0, 1, 2) else StreamKind.STDOUT
                self._left = length
                continue
            take = bytes(self._buffer[: self._left])
            del self._buffer[: len(take)]
            self._left -= len(take)
            if pieces and pieces[-1][0] is self._kind:
                pieces[-1] = (self._kind, pieces[-1][1] + take)
            else:
                pieces.append((self._kind, take))
        return pieces

    @property
    def pending(self) -> bool:
        """Whether a frame was cut off (the stream ended inside one)."""
        return bool(self._buffer) or self._left > 0
