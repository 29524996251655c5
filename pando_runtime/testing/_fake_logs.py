"""The fake adapter's log buffers: timestamped lines, followed live."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import anyio

from .._contract._log_options import LogOptions

__all__ = ["LogBuffer"]


class LogBuffer:
    """One instance's log: lines with the time they were written."""

    def __init__(self) -> None:
        self.lines: list[tuple[datetime, bytes]] = []
        self.closed = False
        self._changed: anyio.Event | None = None

    def write(self, at: datetime, data: bytes) -> None:
        """Append ``data``, split into lines that keep their newline."""
        for line in data.splitlines(keepends=True):
            self.lines.append((at, line))
        self._notify()

    def close(self) -> None:
        """The instance ended: followers finish once they have read everything."""
        self.closed = True
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _selected(self, options: LogOptions) -> list[bytes]:
        lines = [line for at, line in self.lines if options.since is None or at >= options.since]
        if options.tail is not None:
            lines = lines[-options.tail :] if options.tail else []
        return lines

    async def read(self, options: LogOptions) -> AsyncIterator[bytes]:
        """The selected lines; with ``follow``, then new lines until the instance ends."""
        for line in self._selected(options):
            yield line
        if not options.follow:
            return
        seen = len(self.lines)
        while True:
            while seen < len(self.lines):
                yield self.lines[seen][1]
                seen += 1
            if self.closed:
                return
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()
