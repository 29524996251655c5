"""A unix-socket proxy in front of the real daemon, which a test can cut and restore.

The adapter under test dials the proxy; :meth:`SocketProxy.cut` closes every open
connection (the event stream really ends) and refuses new ones until :meth:`restore`, while
the daemon keeps serving every other client. Half-closes are passed on, so exec's end of
stdin crosses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
from anyio.abc import SocketStream, TaskGroup


class SocketProxy:
    """Forwards ``listen`` to ``target`` (both unix socket paths)."""

    def __init__(self, listen: Path, target: Path) -> None:
        self.listen = listen
        self.target = target
        self.open = True
        self.accepted = 0
        self._scopes: set[anyio.CancelScope] = set()

    @property
    def host(self) -> str:
        """The adapter's ``host`` setting for the proxy."""
        return f"unix://{self.listen}"

    def cut(self) -> None:
        """Close every connection and refuse new ones."""
        self.open = False
        for scope in list(self._scopes):
            scope.cancel()

    def restore(self) -> None:
        """Accept connections again."""
        self.open = True

    async def _serve_one(self, client: SocketStream) -> None:
        self.accepted += 1
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                if not self.open:
                    return
                async with (
                    await anyio.connect_unix(self.target) as upstream,
                    anyio.create_task_group() as pumps,
                ):
                    pumps.start_soon(_pump, client, upstream)
                    pumps.start_soon(_pump, upstream, client)
            except OSError:
                return
            finally:
                self._scopes.discard(scope)
                with contextlib.suppress(OSError, anyio.BrokenResourceError):
                    await client.aclose()

    async def _serve(self, group: TaskGroup, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        listener = await anyio.create_unix_listener(self.listen)
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


async def _pump(source: SocketStream, sink: SocketStream) -> None:
    try:
        while True:
            data = await source.receive()
            await sink.send(data)
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await sink.send_eof()
