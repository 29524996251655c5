"""The engine client's unix-socket connections: a read cancelled in the very loop turn its
socket turns readable (the adapter closing its event stream while events arrive) trips
nothing and loses nothing, where anyio's own unix stream has asyncio report an
``InvalidStateError`` from the selector's callback (why ``api/_unix.py`` exists).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from pando_runtime_docker.api._unix import UnixSocketBackend

pytestmark = pytest.mark.anyio


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A listening unix socket (its path, and the socket to accept from)."""
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen()
        yield path, server


@contextmanager
def loop_errors(backend: str) -> Iterator[list[dict[str, Any]]]:
    """What the asyncio loop reports from its callbacks while the block runs (trio: none)."""
    seen: list[dict[str, Any]] = []
    if backend != "asyncio":
        yield seen
        return
    loop = asyncio.get_running_loop()
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        yield seen
    finally:
        loop.set_exception_handler(before)


async def cancel_as_it_turns_readable(
    receive: Callable[[], Awaitable[bytes]], peer: socket.socket
) -> None:
    """Start a read; make its socket readable; cancel the read one loop turn later, when the
    loop has seen the socket readable but not yet run its callback."""
    async with anyio.create_task_group() as group:
        group.start_soon(_awaited, receive)
        await anyio.sleep(0.05)  # the read waits on the socket
        peer.send(b"x")
        await anyio.lowlevel.checkpoint()
        group.cancel_scope.cancel()
    await anyio.sleep(0.01)  # the loop runs what it had queued


async def _awaited(receive: Callable[[], Awaitable[bytes]]) -> None:
    await receive()


async def test_a_read_cancelled_as_its_socket_turns_readable_trips_nothing_and_loses_nothing(
    anyio_backend: str, listening: tuple[str, socket.socket]
) -> None:
    path, server = listening
    stream = await UnixSocketBackend().connect_unix_socket(path, timeout=5)
    peer, _ = server.accept()
    received: list[bytes] = []

    async def read() -> bytes:
        received.append(await stream.read(1024))
        return received[-1]

    with peer, loop_errors(anyio_backend) as errors:
        await cancel_as_it_turns_readable(read, peer)
        if not received:  # the read was cancelled (trio may finish it first): the byte waits
            with anyio.fail_after(5):
                await read()
        await stream.aclose()
    assert errors == []
    assert received == [b"x"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_anyio_unix_stream_trips_on_the_same_cancellation(
    listening: tuple[str, socket.socket],
) -> None:
    """The bug the backend avoids, shown (asyncio only: trio's stream is unaffected). When
    this fails, anyio has fixed it: ``api/_unix.py`` can go back to ``anyio.connect_unix``."""
    path, server = listening
    stream = await anyio.connect_unix(path)
    peer, _ = server.accept()
    with peer, loop_errors("asyncio") as errors:
        await cancel_as_it_turns_readable(stream.receive, peer)
        await stream.aclose()
    assert [type(error.get("exception")) for error in errors] == [asyncio.InvalidStateError]
