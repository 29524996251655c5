"""The event loop's clock and UTC: a time on one, the same moment on the other."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio

__all__ = ["LoopClock"]


class LoopClock:
    """Converts between the event loop's clock (what watches prove with) and UTC times.

    The event loop's clock is mapped to UTC once, at the first conversion: reading both
    clocks on every call made two answers with no proof in between differ by the gap between
    the reads, sometimes going back in time.
    """

    def __init__(self) -> None:
        self._utc_epoch: datetime | None = None

    def _epoch(self) -> datetime:
        """The UTC time of the event loop's clock's zero."""
        if self._utc_epoch is None:
            self._utc_epoch = datetime.now(UTC) - timedelta(seconds=anyio.current_time())
        return self._utc_epoch

    def utc(self, at: float) -> datetime:
        """The UTC time of ``at`` on the event loop's clock."""
        return self._epoch() + timedelta(seconds=at)

    def monotonic(self, when: datetime) -> float:
        """The event loop's clock at the UTC time ``when``."""
        return (when - self._epoch()).total_seconds()
