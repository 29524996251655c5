"""Whether the API server answers: the cache's probes, and reachability learned from any call.

A hung server (or a hung connection to it) leaves a watch open and quiet: only an answer
proves the cache current. :class:`Liveness` asks (``probe``) whenever the watches have been
silent, and remembers whether the server answers. The first failed probe is logged (WARNING,
on ``pando_runtime.kubernetes.watch``) with its reason, repeats at most every
:data:`PROBE_REPEAT_LOG_INTERVAL` seconds, the return at INFO.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from .._log import logger
from ..api._errors import ApiError
from ._watch import WatchLoop, why

__all__ = ["PROBE_REPEAT_LOG_INTERVAL", "Liveness", "prove_alive"]

_LOG = logger("watch")

PROBE_REPEAT_LOG_INTERVAL = 300.0
"""Seconds between warnings while the API server keeps not answering the probe."""


def prove_alive(loops: Mapping[str, WatchLoop], at: float) -> None:
    """Every watch is known current at ``at`` (the server answered while they were connected)."""
    for loop in loops.values():
        loop.proved_alive(at)


class Liveness:
    """The API server's liveness as the cache sees it: probes, and what answered since.

    ``probe`` asks the API server whether it answers; it raises :class:`ApiError` when it
    does not (anything else is a bug, and is not taken for an outage). ``answers`` counts
    the calls the API server has answered, any of them: an answer after a failed probe shows
    it reachable again before the next probe does. ``max_staleness`` is only said in the
    warning (when observe starts refusing).
    """

    def __init__(
        self,
        probe: Callable[[float], Awaitable[object]] | None,
        *,
        interval: float,
        answers: Callable[[], int] | None,
        max_staleness: float,
        log_extra: Mapping[str, Any],
    ) -> None:
        self._probe = probe
        self.interval = interval
        self._answers = answers
        self._max_staleness = max_staleness
        self._log_extra = dict(log_extra)
        self._unanswered_at: int | None = None
        """``answers`` when a probe last got no answer; ``None`` once one is answered."""
        self.probes = 0
        """Probes sent by :meth:`run` (not those of a confirmation)."""
        self._failures = 0
        self._warned_at: float | None = None

    @property
    def can_probe(self) -> bool:
        """There is a probe to ask (a cache without one is proved by its watches only)."""
        return self._probe is not None

    @property
    def reachable(self) -> bool:
        """False while the API server has answered nothing since a probe it did not answer.

        A probe's failure is a fact about one moment: a write or a read answered since then
        (the server restarted, say) proves it back, though the next probe is seconds away.
        """
        if self._unanswered_at is None:
            return True
        return self._answers is not None and self._answers() > self._unanswered_at

    async def ask(self, timeout: float) -> bool:  # noqa: ASYNC109 - the probe's own bound
        """Probe once: whether the API server answered (a failure is remembered and logged)."""
        if self._probe is None:
            return False
        try:
            await self._probe(timeout)
        except ApiError as error:
            self._failed(error)
            return False
        self._answered()
        return True

    async def run(
        self, loops: Mapping[str, WatchLoop], unconfirmed_for: Callable[[], float]
    ) -> None:
        """Probe whenever the watches have been silent for an interval, until cancelled.

        An answer while every watch is connected confirms them.
        """
        if self._probe is None:
            return
        while True:
            await anyio.sleep(self.interval)
            if unconfirmed_for() < self.interval:
                continue
            self.probes += 1
            if not await self.ask(self.interval):
                continue
            if all(loop.healthy for loop in loops.values()):
                prove_alive(loops, anyio.current_time())

    def _failed(self, error: ApiError) -> None:
        """No answer: say why at the first failure, then at most every few minutes."""
        self._unanswered_at = self._answers() if self._answers is not None else 0
        self._failures += 1
        now = anyio.current_time()
        last = self._warned_at
        extra = {**self._log_extra, "failures": self._failures, "status": error.status}
        if last is None or now - last >= PROBE_REPEAT_LOG_INTERVAL:
            self._warned_at = now
            _LOG.warning(
                "the API server does not answer the cache's probe (%s): failed probes: %d; "
                "observe raises AdapterUnavailable once the cache is %.0f s unconfirmed",
                why(error),
                self._failures,
                self._max_staleness,
                extra=extra,
            )
        else:
            _LOG.debug("the cache's probe failed again (%s)", why(error), extra=extra)

    def _answered(self) -> None:
        self._unanswered_at = None
        if self._failures:
            _LOG.info(
                "the API server answers the cache's probe again, after %d failed probes",
                self._failures,
                extra={**self._log_extra, "failures": self._failures},
            )
        self._failures = 0
        self._warned_at = None
