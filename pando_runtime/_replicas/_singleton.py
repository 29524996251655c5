"""Singletons: work one replica at a time does, under a lease of its own, handed over on failure.

Used by :meth:`Membership.singleton`. The holder renews the singleton's lease every
retry period; when it cannot renew for the renew deadline, or finds the lease taken,
the body's cancel scope is cancelled and the block raises :class:`NotOwner`. Another
replica takes the lease once it was released, or once it has seen it unchanged for its
duration (a crashed holder's).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import anyio
import attrs

from .._contract._errors import NotOwner, PandoRuntimeError
from .._util._background import beside
from .._util._log import logger
from ._leases import (
    SINGLETONS,
    LeaseConflict,
    LeaseRecord,
    LeaseStore,
    LeaseWatch,
    StoredLease,
)
from ._settings import MembershipSettings, check_singleton_name

__all__ = ["Singletons"]

_LOG = logger("membership")


@attrs.define
class _Held:
    lease: StoredLease
    renewed_at: float
    scope: anyio.CancelScope | None = None
    lost: str | None = None
    remedy: str | None = None
    """What to do about ``lost``, when the store said (a renewal refused for a reason)."""
    crashed: bool = False


class Singletons:
    """The singletons one replica holds or waits for."""

    def __init__(
        self,
        store: LeaseStore,
        replica: str,
        settings: MembershipSettings,
        clock: Callable[[], float],
        alive: Callable[[], bool],
    ) -> None:
        self._store = store
        self._replica = replica
        self._settings = settings
        self._clock = clock
        self._alive = alive
        self._watch = LeaseWatch(clock)
        self._held: dict[str, _Held] = {}
        self._reported: dict[str, str] = {}  # singleton -> the failure last logged while waiting

    def crash(self) -> None:
        """Stop renewing every singleton held, releasing none; their blocks are cancelled."""
        for held in self._held.values():
            held.crashed = True
            if held.scope is not None:
                held.scope.cancel()

    def _refused(self, name: str, why: str, remedy: str) -> NotOwner:
        return NotOwner(
            f"replica {self._replica!r} does not hold singleton {name!r}: {why}",
            remedy=remedy,
            details={"replica": self._replica, "singleton": name, "owner": None},
        )

    def _waiting_on(self, name: str, error: PandoRuntimeError) -> None:
        """Log why ``name`` is not taken yet: at each new reason, with what to do about it."""
        said = f"{error.message} (remedy: {error.remedy})"
        if self._reported.get(name) != said:
            self._reported[name] = said
            _LOG.warning("singleton %s: not taken yet, retrying: %s", name, said)

    async def _try(self, name: str) -> _Held | None:
        try:
            leases = {lease.name: lease for lease in await self._store.list_leases(SINGLETONS)}
        except PandoRuntimeError as error:
            self._waiting_on(name, error)
            return None
        current = leases.get(name)
        if current is not None:
            self._watch.see(SINGLETONS, current)
            if current.record.holder != self._replica and self._watch.live(SINGLETONS, current):
                return None
        record = LeaseRecord(
            holder=self._replica,
            renewals=current.record.renewals + 1 if current else 0,
            duration=self._settings.lease_duration,
        )
        started = self._clock()
        try:
            with anyio.move_on_after(self._settings.renew_deadline):
                lease = await self._store.write_lease(
                    SINGLETONS, name, record, version=current.version if current else None
                )
                return _Held(lease=lease, renewed_at=started)
        except LeaseConflict:  # another replica took it first
            _LOG.debug("singleton %s: taken by another replica first", name)
        except PandoRuntimeError as error:  # refused, or unreachable: say why
            self._waiting_on(name, error)
        return None

    async def _acquire(self, name: str) -> _Held:
        while True:
            if not self._alive():
                raise self._refused(
                    name,
                    "the replica left its membership",
                    "Hold singletons within a membership the replica is in: join again first.",
                )
            held = await self._try(name)
            if held is not None:
                self._reported.pop(name, None)
                _LOG.info("singleton %s: held by %s", name, self._replica)
                return held
            await anyio.sleep(self._settings.retry_period)

    async def _renew(self, name: str, held: _Held, scope: anyio.CancelScope) -> None:
        settings = self._settings
        while True:
            left = held.renewed_at + settings.renew_deadline - self._clock()
            if left <= 0:
                if held.remedy is None:  # no answer at all; else the store's reason stays
                    held.lost = f"its lease was not renewed for {settings.renew_deadline:g} s"
                break
            await anyio.sleep(min(settings.retry_period, left))
            started = self._clock()
            record = attrs.evolve(held.lease.record, renewals=held.lease.record.renewals + 1)
            with anyio.move_on_after(max(held.renewed_at + settings.renew_deadline - started, 0)):
                try:
                    held.lease = await self._store.write_lease(
                        SINGLETONS, name, record, version=held.lease.version
                    )
                    held.renewed_at = started
                    held.lost = held.remedy = None
                except LeaseConflict:
                    held.lost = "another replica took its lease"
                    break
                except PandoRuntimeError as error:
                    _LOG.warning("singleton %s: renewal failed: %s", name, error)
                    held.lost = (
                        f"its lease was not renewed for {settings.renew_deadline:g} s "
                        f"(the last renewal: {error.message})"
                    )
                    held.remedy = error.remedy
        _LOG.warning("singleton %s: lost by %s (%s)", name, self._replica, held.lost)
        scope.cancel()

    async def _release(self, name: str, held: _Held) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._settings.renew_deadline):
            try:
                await self._store.delete_lease(SINGLETONS, name, version=held.lease.version)
                _LOG.info("singleton %s: released by %s", name, self._replica)
            except PandoRuntimeError as error:
                _LOG.warning("singleton %s: not released (%s)", name, error.code)

    @contextlib.asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[None]:
        """Wait until this replica holds ``name``; hold it for the block (see the module)."""
        check_singleton_name(name)
        if name in self._held:
            raise self._refused(
                name,
                "this replica already holds or awaits it",
                "Hold a singleton once per replica: leave the first block before entering again.",
            )
        held = await self._acquire(name)
        self._held[name] = held

        async def renew(scope: anyio.CancelScope) -> None:
            held.scope = scope
            if held.crashed:  # crashed before this task started
                scope.cancel()
                return
            await self._renew(name, held, scope)

        try:
            async with beside(renew):
                yield
        finally:
            del self._held[name]
            if held.lost is None and not held.crashed:
                await self._release(name, held)
        if held.crashed:
            raise self._refused(name, "the replica crashed", "Join again to hold it again.")
        if held.lost is not None:
            raise self._refused(
                name,
                held.lost,
                held.remedy
                or "Enter membership.singleton(name) again: it waits until this replica holds it.",
            )
