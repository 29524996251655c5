"""A token bucket of our own: the adapter's requests per second and burst.

The Kubernetes client has no client-side rate limit (client-go's ``QPS`` and
``Burst``); without one a host applying hundreds of apps at once would flood
the API server and be throttled with 429s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; :meth:`acquire` waits for one.

    Waiters are served in order (one lock), so a burst of callers spreads out
    evenly instead of racing. ``clock`` is injectable for tests.
    """

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = anyio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def try_acquire(self) -> float:
        """Take a token if one is there (returns 0.0), else the seconds until one will be."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate

    async def acquire(self) -> None:
        """Wait until a token is available, then take it."""
        async with self._lock:
            while (wait := self.try_acquire()) > 0:  # noqa: ASYNC110 - the wait is computed
                await anyio.sleep(wait)
