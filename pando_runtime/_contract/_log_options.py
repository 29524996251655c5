"""Options for reading a workload's log."""

from __future__ import annotations

from datetime import datetime

import attrs

__all__ = ["LogOptions"]


@attrs.frozen(kw_only=True)
class LogOptions:
    """Which part of the log to read.

    ``tail`` keeps the last N lines; ``since`` drops lines before a moment;
    ``follow`` keeps the stream open for new lines until the host closes it.
    """

    follow: bool = False
    since: datetime | None = None
    tail: int | None = None
