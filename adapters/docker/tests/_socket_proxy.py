"""A proxy in front of a real server, which a test can cut and restore.

Two shapes: ``SocketProxy(listen, target)`` joins two unix sockets (the adapter in
front of the daemon's socket); :meth:`SocketProxy.into_namespace` listens on the host's
loopback and dials a TCP port inside a network namespace (the engine's TLS port or its
sshd: the namespace has no route to the host, so this is the only way in). The adapter under
test dials the proxy; :meth:`SocketProxy.cut` closes every open connection (the event stream,
or the SSH connection, really ends) and refuses new ones until :meth:`restore`, while the
server keeps serving every other client. Half-closes are passed on, so exec's end of stdin
crosses it. ``rewrite`` changes what the client sends on its way (an engine that ignores part
of a request, as seen by the adapter); :meth:`SocketProxy.hold` keeps a request in flight (a
writer paused in the middle of a write) while every other passes. Its unix connections are the
adapter's own (``api/_unix.py``), and it accepts its own the same way: anyio's unix stream trips
on a read cancelled as data arrives, which a cut does.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Self

import anyio
from anyio.abc import SocketStream, TaskGroup
from pando_runtime_docker.api._unix import connect_unix


class SocketProxy:
    """Forwards the connections made to it, on ``listen`` (a unix socket; ``None``: a free TCP
    port on the host's loopback), to ``target``: a unix socket, or what a function dials."""

    def __init__(
        self,
        listen: Path | None,
        target: Path | Callable[[], Awaitable[SocketStream]],
        rewrite: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.listen = listen
        self.rewrite = rewrite
        """Applied to each chunk the client sends (a pattern split across two chunks is
        missed: keep patterns short, inside a request body)."""
        self.open = True
        self.accepted = 0
        self.port = 0
        """The loopback port it listens on (TCP), once running."""
        self.held = 0
        """Chunks held so far (see :meth:`hold`)."""
        self._holding: bytes | None = None
        self._released: anyio.Event | None = None
        self._scopes: set[anyio.CancelScope] = set()
        self._dial = target if callable(target) else functools.partial(connect_unix, target)

    @classmethod
    def into_namespace(cls, engine: Any, address: str, port: int) -> SocketProxy:
        """A proxy on ``127.0.0.1:<free port>`` of the host to ``address:port`` in the
        harness engine's namespace (dialled by its ``connect``)."""

        async def dial() -> SocketStream:
            sock = await anyio.to_thread.run_sync(engine.connect, address, port)
            sock.setblocking(False)  # noqa: FBT003 - the stream wrapper wants it
            return await SocketStream.from_socket(sock)

        return cls(None, dial)

    @property
    def host(self) -> str:
        """The adapter's ``host`` setting for the proxy (``unix://`` or ``tcp://``)."""
        return f"unix://{self.listen}" if self.listen else f"tcp://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Close every connection and refuse new ones."""
        self.open = False
        for scope in list(self._scopes):
            scope.cancel()

    def restore(self) -> None:
        """Accept connections again."""
        self.open = True

    def hold(self, pattern: bytes) -> None:
        """Hold each chunk the client sends holding ``pattern`` (and what follows it on its
        connection) until :meth:`release`; other connections pass."""
        self._holding = pattern
        self._released = anyio.Event()

    def release(self) -> None:
        """Pass the held chunks on, and hold nothing more."""
        self._holding = None
        if self._released is not None:
            self._released.set()

    async def _gate(self, data: bytes) -> None:
        if self._holding is not None and self._released is not None and self._holding in data:
            self.held += 1
            await self._released.wait()

    async def _serve_one(self, client: SocketStream) -> None:
        self.accepted += 1
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                if not self.open:
                    return
                async with await self._dial() as upstream, anyio.create_task_group() as pumps:
                    pumps.start_soon(_pump, client, upstream, self.rewrite, self._gate)
                    pumps.start_soon(_pump, upstream, client)
            except OSError:
                return
            finally:
                self._scopes.discard(scope)
                with contextlib.suppress(OSError, anyio.BrokenResourceError):
                    await client.aclose()

    def _listener(self) -> _Listener:
        if self.listen is not None:
            return _Listener(socket.AF_UNIX, str(self.listen))
        listener = _Listener(socket.AF_INET, ("127.0.0.1", 0))
        self.port = listener.port
        return listener

    async def _serve(self, group: TaskGroup, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        listener = self._listener()
        task_status.started()
        async with listener:
            while True:
                client = await listener.accept()
                group.start_soon(self._serve_one, client)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[SocketProxy]:
        """Serve until the block ends."""
        async with anyio.create_task_group() as group:
            await group.start(self._serve, group)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()


async def _pump(
    source: SocketStream,
    sink: SocketStream,
    rewrite: Callable[[bytes], bytes] | None = None,
    gate: Callable[[bytes], Awaitable[None]] | None = None,
) -> None:
    try:
        while True:
            data = await source.receive()
            if gate is not None:
                await gate(data)
            await sink.send(rewrite(data) if rewrite else data)
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await sink.send_eof()


class _Listener:
    """A listening socket whose connections are streams as :func:`connect_unix` makes them."""

    def __init__(self, family: socket.AddressFamily, address: str | tuple[str, int]) -> None:
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setblocking(False)  # noqa: FBT003 - accepted after waiting
        self._socket.bind(address)
        self._socket.listen()

    @property
    def port(self) -> int:
        """The port it listens on (TCP)."""
        return int(self._socket.getsockname()[1])

    async def accept(self) -> SocketStream:
        while True:
            await anyio.wait_readable(self._socket)
            try:
                client, _ = self._socket.accept()
            except BlockingIOError:  # another waiter took it
                continue
            client.setblocking(False)  # noqa: FBT003 - the stream wrapper wants it
            return await SocketStream.from_socket(client)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        self._socket.close()
