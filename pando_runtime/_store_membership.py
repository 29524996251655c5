"""Membership over a lease store named in an adapter's settings (Docker, a fleet).

An adapter whose runtime has no lease API of its own takes a ``lease_store`` setting
(:class:`~pando_runtime.plugin.LeaseStoreSetting`) and keeps a :class:`StoreMembership`: the
store loaded by name when a membership is joined, the core's :class:`Membership` over it, and
the write guard every write runs in. The runtime fences nothing itself: a write is refused by
the guard in this process, never by the runtime (``docs/replicas.md`` says what remains).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from ._contract._capabilities import Capability
from ._contract._errors import CapabilityUnsupported, Problem
from ._lease_stores import (
    LeaseStoreClient,
    LeaseStoreSetting,
    lease_store_problems,
    load_lease_store,
)
from ._replicas._membership import Membership
from ._replicas._settings import MembershipSettings
from ._replicas._slot import MembershipSlot

__all__ = ["StoreMembership"]


class StoreMembership:
    """``membership`` for an adapter over the lease store its settings name (or none).

    The adapter keeps one, asks :meth:`problems` with its other settings' checks (no I/O),
    declares ``membership`` when :attr:`named`, returns :meth:`join` from ``membership()`` and
    runs every write (``apply``, ``stop``, ``destroy``) in :meth:`writing`. The store is
    loaded when a membership is joined and closed when it ends, so an adapter that never joins
    opens nothing. Only the store's kind is ever logged or put in an error, never its settings.
    """

    def __init__(self, named: LeaseStoreSetting | None) -> None:
        self.named = named
        """The store the settings name; ``None``: no membership is offered."""
        self.slot = MembershipSlot()
        """The write guard: checks nothing until a membership is joined."""
        self.store: LeaseStoreClient | None = None
        """The store while a membership is joined (an adapter may keep more records there)."""

    def problems(self, where: str = "lease_store") -> list[Problem]:
        """What is wrong with the named store and its settings, each at its path under ``where``.

        No I/O and no store code imported beyond its light info.
        """
        return [] if self.named is None else lease_store_problems(self.named, where)

    def join(
        self,
        replica: str,
        settings: MembershipSettings | None,
        *,
        bundles: Callable[[], Awaitable[Iterable[str]]],
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """Join as ``replica`` over the store (``bundles`` lists what the runtime holds).

        Raises:
            CapabilityUnsupported: the settings name no lease store.
        """
        if self.named is None:
            raise CapabilityUnsupported(
                Capability.MEMBERSHIP,
                "no lease store is named: set the adapter's 'lease_store' (docs/replicas.md)",
            )
        return self._joined(self.named, replica, settings, bundles)

    @contextlib.asynccontextmanager
    async def _joined(
        self,
        named: LeaseStoreSetting,
        replica: str,
        settings: MembershipSettings | None,
        bundles: Callable[[], Awaitable[Iterable[str]]],
    ) -> AsyncIterator[Membership]:
        store = load_lease_store(named.kind, named.settings)
        joined = self.slot.join(store, replica, settings, bundles=bundles)
        async with contextlib.aclosing(store), joined as membership:
            self.store = store
            try:
                yield membership
            finally:
                self.store = None

    def writing(self, bundle_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A write of ``bundle_id``: refused (:class:`NotOwner`) unless this replica owns it."""
        return self.slot.writing(bundle_id)
