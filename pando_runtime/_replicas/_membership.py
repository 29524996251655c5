"""A membership: one host replica among several, over a runtime's leases.

A replica holds a lease of its own, renewed every retry period; the live members
are the replicas whose leases were seen renewed within their duration. Each bundle
belongs to one of them by rendezvous hashing (:func:`rendezvous_owner`). A replica
publishes, in its lease, the members it acts under; it writes a bundle only while its
view assigns the bundle to it, no other live replica's published view assigns it to
that replica, and its own lease was renewed within the renew deadline. So:

- on a join, the old owner stops first (it drops what moves before it publishes its
  new view) and the new owner acts once it has read that view: the handover is drained;
- on a leave, the leaver drops everything and deletes its lease: the others take over
  at their next read;
- on a crash, the others take over once they have seen its lease unchanged for its
  duration; it had stopped writing (renew deadline) before that.

See ``docs/replicas.md`` for the guarantees and their limits.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextvars import ContextVar
from types import TracebackType
from typing import Self

import anyio
import attrs
from anyio.streams.memory import MemoryObjectSendStream

from .._contract._errors import NotOwner, PandoRuntimeError
from .._util._background import beside
from .._util._log import logger
from ._leases import (
    MEMBERS,
    LeaseConflict,
    LeaseRecord,
    LeaseStore,
    LeaseWatch,
    StoredLease,
    lease_failure,
)
from ._ownership import OwnershipHistory, OwnershipView
from ._settings import MembershipSettings, OwnershipChange, check_membership
from ._singleton import Singletons

__all__ = ["Membership"]

_LOG = logger("membership")

DRAIN_LEASES = 4
"""Lease durations a handover waits at most for its writes in flight, renewing meanwhile: a
write still going then is stuck, not slow (the adapter's own call timeouts end a slow one)."""

_OVERRIDES: ContextVar[frozenset[tuple[int, str | None]]] = ContextVar(
    "pando_runtime_membership_overrides", default=frozenset()
)


class Membership:
    """One host replica's place among several: members, ownership, changes, singletons.

    Made by an adapter that declares ``membership`` (``adapter.membership(replica=...)``)
    over its runtime's :class:`LeaseStore`; use it as ``async with``. Joining returns once
    the replica's lease is written and the others' are read; leaving drops every bundle
    and deletes the lease, so the others take over at once.

    Args:
        store: the runtime's leases.
        replica: this replica's name, unique among the running replicas (a DNS label).
        settings: lease timings (client-go's by default).
        bundles: the ids of the bundles the runtime holds, for :class:`OwnershipChange`.
        clock: a monotonic clock in seconds (``anyio.current_time`` by default).
    """

    def __init__(
        self,
        store: LeaseStore,
        replica: str,
        settings: MembershipSettings | None = None,
        *,
        bundles: Callable[[], Awaitable[Iterable[str]]],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings or MembershipSettings()
        check_membership(replica, self.settings)
        self.replica = replica
        self._store = store
        self._bundles = bundles
        self._clock = clock or anyio.current_time
        self._watch = LeaseWatch(self._now)
        self._state = OwnershipView(me=replica)
        self._history = OwnershipHistory()
        self._live: frozenset[str] = frozenset({replica})
        self._others: dict[str, frozenset[str]] = {}
        self._announced: frozenset[str] = frozenset()
        self._lease: StoredLease | None = None
        self._renewed_at: float | None = None
        self._failure: BaseException | None = None  # why the last renewal or read failed
        self._known: frozenset[str] = frozenset()
        self._subscribers: list[MemoryObjectSendStream[OwnershipChange]] = []
        self._writing: Counter[str] = Counter()  # bundle -> writes in flight
        self._write_ended = anyio.Event()
        self._joined = False
        self._left = False
        self._crashed = False
        self._loop_scope = anyio.CancelScope()
        self._stack = contextlib.AsyncExitStack()
        self._singletons = Singletons(store, replica, self.settings, self._now, self._alive)

    # -- what a host asks ----------------------------------------------------------------

    def members(self) -> frozenset[str]:
        """The live members as this replica last read them, itself included."""
        return self._state.members if self._fresh() else self._live

    def owner(self, bundle_id: str) -> str | None:
        """The replica the current view assigns ``bundle_id`` to.

        ``None`` while this replica's own lease is not renewed (it cannot tell). During
        a handover the named owner may not act yet; :meth:`owns` says whether this one may.
        """
        return self._state.owner(bundle_id) if self._fresh() else None

    def owns(self, bundle_id: str) -> bool:
        """Whether this replica may write ``bundle_id`` now."""
        return self._fresh() and self._state.owns(bundle_id)

    def tenure(self, bundle_id: str) -> int | None:
        """A number that stays the same while this replica owns ``bundle_id`` without a break.

        ``None`` when it does not own it now. After the bundle was lost and gained again
        the number differs: an adapter that fences writes (the Kubernetes adapter's stamp)
        keeps what it did for one tenure and does it again for the next.
        """
        return self._history.tenure(bundle_id) if self.owns(bundle_id) else None

    def check_write(self, bundle_id: str) -> None:
        """Raise :class:`NotOwner` unless this replica owns ``bundle_id`` or overrides it.

        Adapters call this before every write of a bundle (through ``MembershipSlot``).
        """
        overrides = _OVERRIDES.get()
        if (id(self), None) in overrides or (id(self), bundle_id) in overrides:
            _LOG.info(
                "write of %s by %s under an override (owner: %s)",
                bundle_id,
                self.replica,
                self.owner(bundle_id),
                extra={"bundle_id": bundle_id, "replica": self.replica},
            )
            return
        if self.owns(bundle_id):
            return
        owner = self.owner(bundle_id)
        why = (
            f"replica {owner!r} owns it"
            if owner is not None
            else "this replica's lease is not renewed, so it writes nothing"
        )
        if owner == self.replica:
            why = "it is being handed over to this replica (the old owner has not let go yet)"
        raise NotOwner(
            f"replica {self.replica!r} may not write bundle {bundle_id!r}: {why}",
            details={"replica": self.replica, "bundle_id": bundle_id, "owner": owner},
        )

    @contextlib.asynccontextmanager
    async def writing(self, bundle_id: str) -> AsyncIterator[None]:
        """:meth:`check_write`, then count the block as a write of ``bundle_id`` in flight.

        A write of several calls (an apply) goes on after its check. When a join moves the
        bundle away, this replica waits for such writes to end before it publishes the new
        view, so the new owner starts only once the old one has stopped (up to the renew
        deadline less a retry period: a write stuck longer is the stalled-writer limit of
        ``docs/replicas.md``).
        """
        self.check_write(bundle_id)
        self._writing[bundle_id] += 1
        try:
            yield
        finally:
            self._writing[bundle_id] -= 1
            if not self._writing[bundle_id]:
                del self._writing[bundle_id]
            self._write_ended.set()
            self._write_ended = anyio.Event()

    async def _drain(self, keep: Callable[[str], bool]) -> None:
        """Wait until no write is in flight of a bundle ``keep`` lets go (bounded).

        For a leave: the lease is not renewed meanwhile, so the wait ends within the renew
        deadline.
        """
        bound = max(0.0, self.settings.renew_deadline - self.settings.retry_period)
        with anyio.move_on_after(bound):
            while self._in_flight(keep):
                await self._write_ended.wait()
        if self._in_flight(keep):
            self._warn_in_flight(bound)

    async def _drain_renewing(self, keep: Callable[[str], bool], published: frozenset[str]) -> None:
        """Wait until no write of a bundle ``keep`` lets go is in flight, renewing meanwhile.

        Every retry period the lease is renewed with the view already ``published``, which
        still claims the bundles being handed over: nobody else owns them until the writes have
        ended and the new view is published. A busy process whose apply outlasts the renew
        deadline keeps them instead of handing them over mid-write. Only a write that never
        ends is bounded, by :data:`DRAIN_LEASES` lease durations (or a renewal failing past the
        deadline); the fence covers a write landing after that.
        """
        started = self._now()
        limit = max(self.settings.renew_deadline, DRAIN_LEASES * self.settings.lease_duration)
        while self._in_flight(keep):
            with anyio.move_on_after(self.settings.retry_period):
                while self._in_flight(keep):
                    await self._write_ended.wait()
            if not self._in_flight(keep):
                return
            if self._now() - started >= limit or (
                not await self._renew(published) and not self._fresh()
            ):
                self._warn_in_flight(self._now() - started)
                return

    def _in_flight(self, keep: Callable[[str], bool]) -> bool:
        return any(not keep(bundle_id) for bundle_id in self._writing)

    def _warn_in_flight(self, waited: float) -> None:
        _LOG.warning(
            "replica %s: writes of bundles it hands over still in flight after %.3g s",
            self.replica,
            waited,
            extra={"replica": self.replica},
        )

    @contextlib.contextmanager
    def override(self, *bundle_ids: str) -> Iterator[None]:
        """Let this replica write ``bundle_ids`` (every bundle, given none) within the block.

        The override holds for the current task and the tasks it starts in the block;
        each such write is logged. For repairs an operator asked for, not for routine work.
        """
        entries = {(id(self), b) for b in bundle_ids} if bundle_ids else {(id(self), None)}
        token = _OVERRIDES.set(_OVERRIDES.get() | entries)
        try:
            yield
        finally:
            _OVERRIDES.reset(token)

    @contextlib.asynccontextmanager
    async def changes(self) -> AsyncIterator[AsyncIterator[OwnershipChange]]:
        """A stream of :class:`OwnershipChange`: ``async with m.changes() as c: async for ...``.

        The first holds every bundle this replica owns now; then one per change of the
        members or of what it owns. A bundle is reported lost before anyone else may
        write it. The stream ends when the replica leaves.
        """
        send, receive = anyio.create_memory_object_stream[OwnershipChange](math.inf)
        known = await self._known_bundles()
        first = OwnershipChange(
            members=self.members() if self._fresh() else frozenset(),
            gained=frozenset(b for b in known if self.owns(b)),
        )
        if not self._subscribers:
            self._announced = first.members
        send.send_nowait(first)
        if self._left or self._crashed:
            send.close()
        else:
            self._subscribers.append(send)
        try:
            async with receive:
                yield receive
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)
            send.close()

    def singleton(self, name: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Enter once this replica holds the singleton ``name``; one replica at a time.

        The block's cancel scope is cancelled if the singleton is lost (its lease not
        renewed within the renew deadline, or taken); the block then raises
        :class:`NotOwner`. Leaving the block releases it: another replica takes it at
        once; after a crash, once its lease has expired.
        """
        return self._singletons.hold(name)

    def crash(self) -> None:
        """Stop as a crashed process would: renew nothing, release nothing, write nothing.

        For failover tests: the others take over after the lease duration. Open change
        streams end; singleton blocks are cancelled and raise :class:`NotOwner`.
        """
        _LOG.warning("replica %s crashed (on purpose)", self.replica)
        self._crashed = True
        self._loop_scope.cancel()
        self._singletons.crash()
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()

    # -- joining and leaving -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._joined:
            msg = "a membership is joined once"
            raise RuntimeError(msg)
        self._joined = True
        await self._read(first=True)
        target = self._target()
        if not await self._renew(target):
            raise self._join_failed("could not write its lease")
        if not await self._read():
            raise self._join_failed("could not read the members' leases")
        await self._adopt(
            OwnershipView(me=self.replica, view=target, others=self._others, fresh=True)
        )
        await self._stack.enter_async_context(beside(self._run))
        _LOG.info(
            "replica %s joined: %d members",
            self.replica,
            len(self._live),
            extra={"replica": self.replica},
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        crashed = self._crashed
        self._loop_scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.settings.renew_deadline):
            await self._adopt(attrs.evolve(self._state, fresh=False))
            if not crashed:  # the others take over once the lease is deleted: writes end first
                await self._drain(lambda _: False)
        self._left = True
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()
        await self._stack.aclose()
        if crashed or self._lease is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.settings.renew_deadline):
            try:
                await self._store.delete_lease(MEMBERS, self.replica, version=self._lease.version)
                _LOG.info("replica %s left", self.replica, extra={"replica": self.replica})
            except PandoRuntimeError as error:
                _LOG.warning("replica %s: lease not deleted (%s)", self.replica, error.code)

    def _join_failed(self, what: str) -> PandoRuntimeError:
        """Why joining failed: the store's own error (what the runtime answered) or a timeout."""
        error = lease_failure(
            f"replica {self.replica!r} {what}",
            self._failure,
            self.settings.renew_deadline,
            {"replica": self.replica},
        )
        error.__cause__ = self._failure
        return error

    # -- the loop ------------------------------------------------------------------------

    def _now(self) -> float:
        return self._clock()

    def _alive(self) -> bool:
        return self._joined and not self._left and not self._crashed

    def _fresh(self) -> bool:
        if not self._alive() or self._renewed_at is None:
            return False
        return self._now() - self._renewed_at <= self.settings.renew_deadline

    def _target(self) -> frozenset[str]:
        return self._live | {self.replica}

    async def _known_bundles(self) -> frozenset[str]:
        try:
            self._known = frozenset(await self._bundles())
        except PandoRuntimeError as error:
            _LOG.warning("bundles unreadable for ownership changes (%s)", error.code)
        return self._known

    async def _adopt(self, state: OwnershipView) -> None:
        """Make ``state`` current (at once), then tell the change streams."""
        before, self._state = self._state, state
        self._history.record(state)
        if not self._subscribers:
            return
        gained, lost = state.changed(before, await self._known_bundles())
        members = state.members if state.fresh else frozenset()
        if state.dropping is not None:
            members = self._announced  # announced once the new view is published
        if not gained and not lost and members == self._announced:
            return
        self._announced = members
        change = OwnershipChange(members=members, gained=frozenset(gained), lost=frozenset(lost))
        if gained or lost:
            _LOG.info(
                "replica %s: %d bundles gained, %d lost, %d members",
                self.replica,
                len(gained),
                len(lost),
                len(change.members),
                extra={"replica": self.replica},
            )
        for send in self._subscribers:
            send.send_nowait(change)

    async def _renew(self, view: frozenset[str]) -> bool:
        """Write this replica's lease, publishing ``view``; whether it succeeded."""
        started = self._now()
        current = self._lease
        record = LeaseRecord(
            holder=self.replica,
            renewals=current.record.renewals + 1 if current else 0,
            duration=self.settings.lease_duration,
            view=tuple(sorted(view)),
        )
        self._failure = None  # a timeout leaves none
        with anyio.move_on_after(self.settings.renew_deadline):
            try:
                self._lease = await self._store.write_lease(
                    MEMBERS, self.replica, record, version=current.version if current else None
                )
            except LeaseConflict as error:
                # Its lease is at a version it never saw: a renewal the store applied whose
                # answer was lost (or another process under the same name). The read that
                # follows takes the current version; the renewal after it succeeds.
                _LOG.warning(
                    "replica %s: its lease changed under it (a lost answer, or another process "
                    "of the same name); reading it again",
                    self.replica,
                )
                self._lease = None
                self._failure = error
            except PandoRuntimeError as error:
                _LOG.warning("replica %s: renewal failed: %s", self.replica, error)
                self._failure = error
            else:
                self._renewed_at = started
                return True
        return False

    async def _read(self, *, first: bool = False) -> bool:
        """Read the members' leases: who is live, what each published; whether it could."""
        try:
            with anyio.fail_after(self.settings.renew_deadline):
                leases = await self._store.list_leases(MEMBERS)
        except (PandoRuntimeError, TimeoutError) as error:
            self._failure = error
            if first:
                raise self._join_failed("could not read the members' leases") from error
            _LOG.warning(
                "replica %s: leases unreadable: %s", self.replica, error or type(error).__name__
            )
            return False
        self._watch.forget(MEMBERS, {lease.name for lease in leases})
        others: dict[str, frozenset[str]] = {}
        for lease in leases:
            self._watch.see(MEMBERS, lease)
            if lease.name == self.replica:
                if self._lease is None or first:
                    self._lease = lease  # a restart of this replica takes its lease over
                continue
            if self._watch.live(MEMBERS, lease):
                others[lease.name] = frozenset(lease.record.view)
            else:
                await self._remove_expired(lease)
        self._live = frozenset(others) | {self.replica}
        self._others = others
        return True

    async def _remove_expired(self, lease: StoredLease) -> None:
        """Delete a dead replica's lease (if unchanged since read): it no longer counts."""
        try:
            await self._store.delete_lease(MEMBERS, lease.name, version=lease.version)
        except PandoRuntimeError as error:
            _LOG.debug("expired lease of %s not removed (%s)", lease.name, error.code)
        else:
            _LOG.info(
                "replica %s: removed the expired lease of %s",
                self.replica,
                lease.name,
                extra={"replica": self.replica},
            )

    async def _round(self) -> None:
        target = self._target()
        if self._state.fresh and target != self._state.view:
            # Drop what moves away, and let its writes in flight end, before telling anyone
            # of the new view.
            published = self._state.view
            await self._adopt(attrs.evolve(self._state, dropping=target))
            await self._drain_renewing(self._state.owns, published)
        renewed = await self._renew(target)
        if not renewed and self._lease is None:
            await self._read()  # a conflict: learn the lease's version, to renew it next round
        if renewed and await self._read():
            await self._adopt(
                OwnershipView(me=self.replica, view=target, others=self._others, fresh=True)
            )
        elif not self._fresh() and self._state.fresh:
            _LOG.warning(
                "replica %s: lease not renewed for %g s; it writes nothing",
                self.replica,
                self.settings.renew_deadline,
                extra={"replica": self.replica},
            )
            await self._adopt(attrs.evolve(self._state, fresh=False))

    async def _run(self, _scope: anyio.CancelScope) -> None:
        with self._loop_scope:
            while True:
                await anyio.sleep(self.settings.retry_period)
                await self._round()
