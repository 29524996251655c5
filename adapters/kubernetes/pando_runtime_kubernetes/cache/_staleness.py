"""How current the cache is: each watch's last proof, the staleness bound, and proving it now.

A watch is proved current by an event, a bookmark, or an answered probe while it is connected
(its ``proved_at``, on the event loop's clock). The cache is as current as its oldest proof:
past ``max_staleness`` it must not answer, and when the API server does not answer either the
outage is reported at once (:meth:`Staleness.stale_error`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

import anyio

from pando_runtime import AdapterUnavailable

from ._clock import LoopClock
from ._liveness import Liveness, prove_alive
from ._watch import WatchLoop

__all__ = ["Staleness"]


class _Watches(Protocol):
    """What staleness reads of the cache's watches: the loops, and whether they serve."""

    @property
    def loops(self) -> Mapping[str, WatchLoop]: ...

    @property
    def active(self) -> bool: ...

    @property
    def synced(self) -> bool: ...


class Staleness:
    """The cache's freshness: proofs as times, the bound, confirmation on demand.

    ``watches``: the informer that runs the loops; ``liveness``: its probes (a confirmation
    asks one); ``clock``: its conversion of proofs to UTC times.
    """

    def __init__(
        self,
        watches: _Watches,
        liveness: Liveness,
        clock: LoopClock,
        *,
        max_staleness: float,
    ) -> None:
        self._watches = watches
        self._liveness = liveness
        self._clock = clock
        self.max_staleness = max_staleness
        self._confirming = anyio.Lock()

    def unconfirmed_for(self) -> float:
        """Seconds since every watch was last proved current (its oldest proof)."""
        loops = self._watches.loops
        if not loops:
            return 0.0
        oldest = min(loop.proved_at for loop in loops.values())
        return max(0.0, anyio.current_time() - oldest)

    def confirmations(self) -> dict[str, datetime]:
        """Each watch's last proof, as a UTC time (saved with the versions)."""
        now = anyio.current_time()
        return {
            kind: self._clock.utc(min(loop.proved_at, now))
            for kind, loop in self._watches.loops.items()
        }

    def confirmed_at(self) -> datetime:
        """When the cache was last known current (its oldest watch's proof), as a UTC time."""
        now = anyio.current_time()
        proved = min((loop.proved_at for loop in self._watches.loops.values()), default=now)
        return self._clock.utc(min(proved, now))

    @property
    def serves_saved(self) -> bool:
        """A warm start not caught up yet whose saved state is within the staleness bound.

        Every watch either caught up (and is connected) or still holds a saved state whose
        confirmation time is known; ``observe`` may then answer from it at once.
        """
        if not self._watches.active:
            return False
        saved = False
        for loop in self._watches.loops.values():
            if loop.serves_saved:
                saved = True
            elif not (loop.ready and loop.healthy):
                return False
        return saved and self.unconfirmed_for() <= self.max_staleness

    @property
    def fresh(self) -> bool:
        """Synced, and proved current within the staleness bound."""
        return self._watches.synced and self.unconfirmed_for() <= self.max_staleness

    def stale_error(self) -> AdapterUnavailable | None:
        """Why the cache must not answer and the API cannot either, or ``None``.

        Stale past the bound while the API server does not answer (its probe failed and no
        call has been answered since): a direct read would only wait for its timeout, so the
        outage is reported at once.
        """
        stale_for = self.unconfirmed_for()
        if self._liveness.reachable or stale_for <= self.max_staleness:
            return None
        return AdapterUnavailable(
            f"the cache has not been confirmed for {stale_for:.0f} s and the API server "
            "does not answer",
            remedy="Check that the API server is up and reachable; observe answers again "
            "as soon as it is.",
            details={
                "confirmed_at": self.confirmed_at().isoformat(),
                "stale_for": round(stale_for, 1),
            },
        )

    async def confirm(self, at: float, timeout: float) -> bool:  # noqa: ASYNC109 - a bound
        """Wait until the cache is synced and proved current at ``at`` or later.

        A synced cache whose watches have been quiet since before ``at`` is proved by one probe
        of the API server, shared by concurrent callers (the watches are connected, so
        nothing older than the probe is missing). False when not proved within ``timeout``.
        """
        watches = self._watches
        at = min(at, anyio.current_time())
        with anyio.move_on_after(timeout):
            while True:
                proved = min((loop.proved_at for loop in watches.loops.values()), default=at)
                if watches.synced and proved >= at:
                    return True
                if not watches.synced or not self._liveness.can_probe:
                    await anyio.sleep(0.05)
                    continue
                async with self._confirming:
                    proved = min(loop.proved_at for loop in watches.loops.values())
                    if proved >= at:
                        continue
                    asked = anyio.current_time()
                    if not await self._liveness.ask(min(timeout, self._liveness.interval)):
                        await anyio.sleep(0.2)
                        continue
                    if watches.synced:
                        prove_alive(watches.loops, asked)
        return False
