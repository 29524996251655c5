"""A clock a test moves by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["FakeClock"]


class FakeClock:
    """Time that passes only when a test says so; always timezone-aware (UTC)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            msg = "the clock's start must be timezone-aware"
            raise ValueError(msg)

    def now(self) -> datetime:
        """The current fake time."""
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move time forward by ``seconds`` and return the new time."""
        if seconds < 0:
            msg = "time only moves forward"
            raise ValueError(msg)
        self._now += timedelta(seconds=seconds)
        return self._now
