"""Which replica owns a bundle: rendezvous hashing, and one replica's view of it.

:func:`rendezvous_owner` is a pure function: each member draws a weight for the key
from a hash of (member, key) and the heaviest member owns it (highest random weight,
Thaler and Ravishankar). When a member joins, only keys it now outweighs move, all to
it; when one leaves, only its own keys move, each to its runner-up. Every replica
that sees the same members computes the same owner, with nothing to coordinate.

:class:`OwnershipView` is what one replica acts on: the members it adopted (and
published), the views the other live replicas published, and whether its own lease
is renewed. A replica owns a bundle when its view assigns the bundle to it *and* no
other live replica's published view assigns it to that replica: a bundle moving on a
join is acted on by nobody until the old owner has published a view without it.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterable, Mapping

import attrs

__all__ = ["OwnershipHistory", "OwnershipView", "rendezvous_owner", "rendezvous_weight"]


def rendezvous_weight(member: str, key: str) -> int:
    """The weight ``member`` draws for ``key``: 64 bits of BLAKE2b of both, stable everywhere."""
    digest = hashlib.blake2b(f"{member}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous_owner(key: str, members: Iterable[str]) -> str | None:
    """The member that owns ``key`` among ``members`` (``None`` when there are none).

    Ties (vanishingly rare) go to the greater name, so the answer never depends on
    the order ``members`` come in.
    """
    best: tuple[int, str] | None = None
    for member in members:
        candidate = (rendezvous_weight(member, key), member)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


@attrs.frozen(kw_only=True)
class OwnershipView:
    """One replica's ownership at one moment; pure, so a change is a difference of two.

    Attributes:
        me: this replica's name.
        view: the members this replica acts under (itself included), as it published them.
        others: each other live replica's published view, by replica name.
        fresh: whether this replica's own lease is renewed (within the renew deadline);
            a replica that is not fresh owns nothing.
        dropping: while a new view is adopted but not yet published, the members of the
            new view: bundles it moves away are no longer owned, none are gained yet.
    """

    me: str
    view: frozenset[str] = frozenset()
    others: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    fresh: bool = False
    dropping: frozenset[str] | None = None

    @property
    def members(self) -> frozenset[str]:
        """The live members: this replica's view, the members it was adopting included."""
        return self.dropping if self.dropping is not None else self.view

    def owner(self, bundle_id: str) -> str | None:
        """The replica this view assigns ``bundle_id`` to (``None``: not fresh, or no member)."""
        if not self.fresh:
            return None
        return rendezvous_owner(bundle_id, self.members)

    def owns(self, bundle_id: str) -> bool:
        """Whether this replica may write ``bundle_id`` now."""
        if not self.fresh or rendezvous_owner(bundle_id, self.view) != self.me:
            return False
        if self.dropping is not None and rendezvous_owner(bundle_id, self.dropping) != self.me:
            return False
        return all(rendezvous_owner(bundle_id, v) != name for name, v in self.others.items())

    def changed(
        self, before: OwnershipView, bundle_ids: Iterable[str]
    ) -> tuple[set[str], set[str]]:
        """The bundles of ``bundle_ids`` this view gained and lost since ``before``."""
        gained: set[str] = set()
        lost: set[str] = set()
        for bundle_id in bundle_ids:
            now, then = self.owns(bundle_id), before.owns(bundle_id)
            if now and not then:
                gained.add(bundle_id)
            elif then and not now:
                lost.add(bundle_id)
        return gained, lost


class OwnershipHistory:
    """The ownership views a replica adopted, to tell how long it has owned a bundle.

    Only views that differ from the one before are kept, the last ``limit`` of them: a
    tenure that began before the oldest kept view reads as beginning there, so it changes
    as views are dropped (a caller then takes it for a new tenure: safe, never stale).
    """

    def __init__(self, limit: int = 256) -> None:
        self._views: collections.deque[tuple[int, OwnershipView]] = collections.deque(maxlen=limit)
        self._count = 0

    def record(self, view: OwnershipView) -> None:
        """Note ``view`` as adopted now."""
        if self._views and self._views[-1][1] == view:
            return
        self._count += 1
        self._views.append((self._count, view))

    def tenure(self, bundle_id: str) -> int:
        """The number of the first view of the current unbroken run that owns ``bundle_id``."""
        start = self._count
        for number, view in reversed(self._views):
            if not view.owns(bundle_id):
                break
            start = number
        return start
