"""A fleet whose members change while it runs: joined, replaced and left, each said as an event.

A :class:`LiveMembers` source (remote secrets of Kubernetes clusters, a members file) is
followed while the fleet is entered; it changes the members through :class:`MemberChanges`,
which a :class:`LiveFleet` implements over the fleet's :class:`MemberSet`:

- *joined*: the new member is started (each in a task of its own, so one that cannot be
  reached never holds up another); placement and questions use it once it started (entered
  its ``async with``; a member that opens before its view is synced, as a Kubernetes cluster
  does, answers nothing until then and is silent to placement), or after ``join_wait`` seconds
  as a silent member, retried as any other.
- *replaced* (a rotated credential): make-before-break. The new adapter is started beside the
  old one; once it started, questions go to it, its event stream takes over from the old one's
  (no ``MISSED`` for the swap), and the old one is closed once every open stream took over
  (or after ``join_wait``). One that did not start within ``join_wait`` is closed and the old
  one stays.
- *left*: the member is closed and nothing goes there again. The bundles it held (its records
  when it can still say, else where this process found them) are said unavailable, naming it,
  never absent: a host redeploys one elsewhere with ``first_deploy``.
- *refused* (a bad definition, a name taken): nothing changes but the log and the event.

Each is a ``FLEET_CHANGED`` event on the fleet's stream and a log record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import anyio
import attrs
from anyio.abc import TaskGroup, TaskStatus

from .._adapter._abc import RuntimeAdapter
from .._contract._errors import AdapterFailed, AdapterUnavailable
from .._util._log import logger
from ._events import retry_delay
from ._member_set import MemberChange
from ._members import BundleRecords
from ._placer import Placer

__all__ = ["LiveFleet", "LiveMembers", "MemberChanges"]

log = logger("fleet")


class MemberChanges(Protocol):
    """What a :class:`LiveMembers` source may do to a running fleet."""

    async def join(
        self, name: str, adapter: RuntimeAdapter, *, place_new_apps: bool = True
    ) -> None:
        """Start ``adapter`` and add it as member ``name`` (once it started, or timed out).

        ``place_new_apps`` false: its apps are served, no new one goes there.
        """
        ...

    async def replace(self, name: str, adapter: RuntimeAdapter) -> None:
        """Swap member ``name`` for ``adapter``, make-before-break."""
        ...

    async def leave(self, name: str) -> None:
        """Close member ``name``; its bundles are unavailable from now on."""
        ...

    def refuse(self, name: str, reason: str) -> None:
        """Say that a member ``name`` was not taken, and why (no credential in ``reason``)."""
        ...

    def has(self, name: str) -> bool:
        """Whether ``name`` is a member now."""
        ...

    def adapter(self, name: str) -> RuntimeAdapter | None:
        """Member ``name``'s adapter now (``None``: not a member)."""
        ...


@runtime_checkable
class LiveMembers(Protocol):
    """A member source whose members change while the fleet runs.

    ``follow`` runs while the fleet is entered (cancelled when it closes): it calls
    ``task_status.started()`` once its first members were joined (a restarted host rebuilds
    the same fleet before it answers), then changes the members as its own source changes.
    """

    async def follow(
        self, changes: MemberChanges, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None: ...


@attrs.define
class _Held:
    """A member adapter held open by a task of its own until ``stop`` is set."""

    adapter: RuntimeAdapter
    stop: anyio.Event = attrs.field(factory=anyio.Event)
    """Set to close it: it leaves its ``async with`` as a normal exit (a Kubernetes member
    saves its warm store then; a cancelled exit would cut that short)."""
    done: anyio.Event = attrs.field(factory=anyio.Event)
    tried: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once its first start was tried (started or not)."""
    started: anyio.Event = attrs.field(factory=anyio.Event)


class LiveFleet:
    """Each member held open in a task of its own; members added, swapped and dropped live."""

    def __init__(
        self,
        placer: Placer,
        group: TaskGroup,
        *,
        retry: Sequence[float],
        join_wait: float,
    ) -> None:
        self.members = placer.members
        self._placer = placer
        self._group = group
        self._retry = retry
        self._join_wait = join_wait
        self._held: dict[str, _Held] = {}
        self._every: list[_Held] = []
        """Every adapter held, those replaced or left included until their task ended."""
        self._changing: dict[str, anyio.Lock] = {}

    # -- holding members open ---------------------------------------------------------------

    def _hold(self, name: str, adapter: RuntimeAdapter) -> _Held:
        held = _Held(adapter)
        self._every.append(held)
        self._group.start_soon(self._keep_open, name, held, name=f"{self.members.noun} {name}")
        return held

    async def _keep_open(self, name: str, held: _Held) -> None:
        """``held`` open until it is stopped, started again while it cannot start."""
        noun = self.members.noun
        attempt = 0
        try:
            while not held.stop.is_set():
                try:
                    async with held.adapter:
                        if attempt:
                            log.warning("%s %s started", noun, name)
                        held.started.set()
                        if self.members.adapters.get(name, held.adapter) is held.adapter:
                            self.members.started(name)  # joining, or the member now
                        held.tried.set()
                        await held.stop.wait()
                        return
                except (AdapterUnavailable, AdapterFailed) as error:
                    unavailable = AdapterUnavailable(
                        f"it could not start: {error.message}", remedy=error.remedy
                    )
                    if self.members.adapters.get(name, held.adapter) is held.adapter:
                        self.members.not_started(name, unavailable)
                    if not attempt:
                        log.warning("%s %s could not start: %s", noun, name, error.message)
                held.tried.set()
                with anyio.move_on_after(retry_delay(self._retry, attempt)):
                    await held.stop.wait()
                attempt += 1
        finally:
            with anyio.CancelScope(shield=True):
                await held.adapter.aclose()
            held.done.set()
            self._every.remove(held)

    async def aclose(self) -> None:
        """Close every member held, each leaving its ``async with`` as a normal exit.

        One still starting (its runtime slow to answer) is waited for ``join_wait`` seconds at
        most; the fleet's task group then cancels what is left.
        """
        for held in self._every:
            held.stop.set()
        with anyio.move_on_after(self._join_wait):
            for held in list(self._every):
                await held.done.wait()

    async def open_all(self, adapters: Mapping[str, RuntimeAdapter]) -> None:
        """Hold every first member open; returns once each was tried."""
        for name, adapter in adapters.items():
            self._held[name] = self._hold(name, adapter)
        for held in list(self._held.values()):
            await held.tried.wait()

    async def _started_within_bound(self, held: _Held) -> bool:
        """Whether ``held`` started within ``join_wait`` seconds (retried meanwhile)."""
        with anyio.move_on_after(self._join_wait):
            await held.started.wait()
        return held.started.is_set()

    # -- the changes ------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        """Whether ``name`` is a member now."""
        return name in self.members.adapters

    def adapter(self, name: str) -> RuntimeAdapter | None:
        """Member ``name``'s adapter now (``None``: not a member)."""
        return self.members.adapters.get(name)

    async def join(
        self, name: str, adapter: RuntimeAdapter, *, place_new_apps: bool = True
    ) -> None:
        """See :meth:`MemberChanges.join`."""
        async with self._changing.setdefault(name, anyio.Lock()):
            if self.has(name):
                await adapter.aclose()
                self.refuse(name, f"a {self.members.noun} of that name is a member already")
                return
            held = self._hold(name, adapter)
            started = await self._started_within_bound(held)
            self._held[name] = held
            self.members.add(name, adapter, closed=not place_new_apps)
            if not started:
                self.members.not_started(
                    name,
                    AdapterUnavailable(
                        f"it did not start within {self._join_wait:g} s",
                        remedy="Check that its runtime is reachable; it is retried meanwhile.",
                    ),
                )
            self._said("joined", name, "" if started else "not started yet: retried")

    async def replace(self, name: str, adapter: RuntimeAdapter) -> None:
        """See :meth:`MemberChanges.replace`."""
        async with self._changing.setdefault(name, anyio.Lock()):
            old = self._held.get(name)
            if old is None or not self.has(name):
                await adapter.aclose()
                self.refuse(name, f"no {self.members.noun} of that name to replace")
                return
            new = self._hold(name, adapter)
            if not await self._started_within_bound(new):
                new.stop.set()
                self.refuse(
                    name,
                    f"its new definition did not start within {self._join_wait:g} s; "
                    "the old one serves on",
                )
                return
            self._held[name] = new
            self.members.replace(name, adapter)
            change = self._said("replaced", name)
            with anyio.move_on_after(self._join_wait):  # each open stream took over from it
                for handed_over in change.handovers:
                    await handed_over.wait()
            old.stop.set()

    async def leave(self, name: str) -> None:
        """See :meth:`MemberChanges.leave`."""
        async with self._changing.setdefault(name, anyio.Lock()):
            held = self._held.get(name)
            if held is None or not self.has(name):
                return
            fleet = self.members.made
            if fleet is not None and name == fleet.control:
                self.refuse(name, "the control member cannot leave the fleet")
                return
            bundles = await self._bundles_of(name, held.adapter)
            self.members.remove(name, bundles)
            self._placer.reservations.drop_member(name)
            del self._held[name]
            held.stop.set()
            self._said("left", name, f"{len(bundles)} bundles unavailable")

    async def _bundles_of(self, name: str, adapter: RuntimeAdapter) -> set[str]:
        """What a leaving member held: its records if it can still say, and what was found there."""
        bundles = {b for b, home in self._placer.placed.items() if home == name}
        if isinstance(adapter, BundleRecords):
            with anyio.move_on_after(self._join_wait):
                try:
                    bundles |= set(await adapter.held_bundles())
                except (AdapterUnavailable, AdapterFailed) as error:
                    log.warning(
                        "%s %s: its bundles could not be listed as it left (%s); "
                        "those found there are said unavailable",
                        self.members.noun,
                        name,
                        error.message,
                    )
        return bundles

    def refuse(self, name: str, reason: str) -> None:
        """See :meth:`MemberChanges.refuse`."""
        self._said("refused", name, reason)

    def _said(self, change: str, name: str, reason: str = "") -> MemberChange:
        noun = self.members.noun
        level = log.warning if change == "refused" else log.info
        level(
            "%s %s %s%s",
            noun,
            name,
            change,
            f": {reason}" if reason else "",
            extra={noun: name, "change": change},
        )
        said = MemberChange(change, name, reason)
        self.members.announce(said)
        return said
