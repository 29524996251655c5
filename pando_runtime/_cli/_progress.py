"""The command line's display while apps become ready.

On a terminal one status line is redrawn in place; elsewhere (a pipe, a CI log) a plain line is
printed each time the count of running workloads changes, so logs stay short and greppable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

import attrs

__all__ = ["AppProgress", "ReadyDisplay"]

_SPINNER = "|/-\\"
_CLEAR_LINE = "\r\x1b[2K"


@attrs.frozen
class AppProgress:
    """How far one app is: its running workloads out of all, and those still waited for."""

    bundle_id: str
    running: int
    total: int
    waiting: tuple[str, ...] = ()

    def line(self) -> str:
        """``waiting for shop: 1/2 running``: the plain form."""
        return f"waiting for {self.bundle_id}: {self.running}/{self.total} running"


class ReadyDisplay:
    """Shows :class:`AppProgress` of one or more apps on ``stream`` (stderr)."""

    def __init__(self, stream: TextIO, *, live: bool | None = None) -> None:
        self._stream = stream
        self._live = stream.isatty() if live is None else live
        self._shown: tuple[AppProgress, ...] | None = None
        self._ticks = 0

    def update(self, apps: Sequence[AppProgress], elapsed: float) -> None:
        """Show the latest state; plain output repeats nothing unchanged."""
        apps = tuple(apps)
        if self._live:
            self._ticks += 1
            parts = [
                f"{a.bundle_id} {a.running}/{a.total}"
                + (f" (waiting: {', '.join(a.waiting)})" if a.waiting else "")
                for a in apps
            ]
            spinner = _SPINNER[self._ticks % len(_SPINNER)]
            self._stream.write(f"{_CLEAR_LINE}{spinner} {'; '.join(parts)}  {elapsed:.0f}s")
        else:
            before = {a.bundle_id: a for a in self._shown or ()}
            for app in apps:
                previous = before.get(app.bundle_id)
                if previous is None or previous.running != app.running:
                    self._stream.write(app.line() + "\n")
        self._shown = apps
        self._stream.flush()

    def finish(self) -> None:
        """End the display: on a terminal, leave the final state as a plain line per app."""
        if self._live and self._shown is not None:
            self._stream.write(_CLEAR_LINE + "".join(a.line() + "\n" for a in self._shown))
            self._stream.flush()
