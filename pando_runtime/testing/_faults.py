"""Fault injection for the fake adapter: failures and latency, per method."""

from __future__ import annotations

from collections import Counter, deque

import anyio

from .._contract._errors import PandoRuntimeError

__all__ = ["Faults"]


class Faults:
    """What the next calls of a method should suffer.

    ``fail_next("observe", AdapterUnavailable("api down"), times=2)`` makes the
    next two ``observe`` calls raise; ``add_latency("apply", 0.2)`` delays
    every ``apply``. Every call is counted in :attr:`calls`, failed ones too.
    """

    def __init__(self) -> None:
        self._failures: dict[str, deque[PandoRuntimeError]] = {}
        self._latency: dict[str, float] = {}
        self.calls: Counter[str] = Counter()

    def fail_next(self, method: str, error: PandoRuntimeError, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` raise ``error``."""
        self._failures.setdefault(method, deque()).extend([error] * times)

    def add_latency(self, method: str, seconds: float) -> None:
        """Delay every call of ``method`` by ``seconds`` (0 removes the delay)."""
        if seconds:
            self._latency[method] = seconds
        else:
            self._latency.pop(method, None)

    def clear(self) -> None:
        """Forget every pending failure and latency."""
        self._failures.clear()
        self._latency.clear()

    def pending(self, method: str) -> int:
        """How many injected failures of ``method`` are still to come."""
        return len(self._failures.get(method, ()))

    async def enter(self, method: str) -> None:
        """Count a call of ``method``, wait its latency, raise its next failure."""
        self.calls[method] += 1
        delay = self._latency.get(method)
        if delay:
            await anyio.sleep(delay)
        queue = self._failures.get(method)
        if queue:
            raise queue.popleft()
