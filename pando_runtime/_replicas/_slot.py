"""The one membership an adapter may have joined, and the write guard, for adapter authors.

Every adapter that offers ``membership`` guards its writes the same way: it keeps a
:class:`MembershipSlot`, returns ``slot.join(...)`` from ``membership()`` and calls
``slot.check_write(bundle_id)`` first thing in ``apply``, ``stop`` and ``destroy`` (or
runs them in ``async with slot.writing(bundle_id):``, when a write takes several calls, so
that a handover waits for it).
An adapter that never joined checks nothing: a single-process host sees no change.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from .._contract._errors import InvalidInput, Problem
from ._leases import LeaseStore
from ._membership import Membership
from ._settings import MembershipSettings

__all__ = ["MembershipSlot"]


class MembershipSlot:
    """At most one joined :class:`Membership` per adapter, and its write guard."""

    def __init__(self) -> None:
        self.current: Membership | None = None
        """The membership joined now, if any."""

    @contextlib.asynccontextmanager
    async def join(
        self,
        store: LeaseStore,
        replica: str,
        settings: MembershipSettings | None = None,
        *,
        bundles: Callable[[], Awaitable[Iterable[str]]],
        clock: Callable[[], float] | None = None,
    ) -> AsyncIterator[Membership]:
        """Join as ``replica`` for the block (see :class:`Membership`)."""
        if self.current is not None:
            raise InvalidInput(
                "this adapter has joined a membership already",
                [Problem("replica", f"joined as {self.current.replica!r}", "conflict")],
                remedy="Join once per adapter; make one adapter per replica.",
            )
        membership = Membership(store, replica, settings, bundles=bundles, clock=clock)
        async with membership:
            self.current = membership
            try:
                yield membership
            finally:
                self.current = None

    def check_write(self, bundle_id: str) -> None:
        """Raise :class:`NotOwner` unless no membership is joined or it lets this write."""
        if self.current is not None:
            self.current.check_write(bundle_id)

    @contextlib.asynccontextmanager
    async def writing(self, bundle_id: str) -> AsyncIterator[None]:
        """:meth:`check_write`, and the block a write in flight (:meth:`Membership.writing`)."""
        if self.current is None:
            yield
            return
        async with self.current.writing(bundle_id):
            yield
