"""Fencing a member's writes at the API server: each write carries the ownership it was made under.

``check_write`` is made when a write starts; a replica that stalls after it (a long pause, a
write stuck in flight) past the lease duration could land its write after another replica
took the bundle over. So a member writes an app under a **stamp** on the app's namespace,
``pando.dev/fence: <epoch>/<replica>``: on its first guarded call (apply, stop, destroy) of a
bundle it gained, it moves the stamp to the next epoch by a merge patch conditional on the
namespace's ``resourceVersion`` (a stale stamp fails with 409); a namespace it creates carries
the stamp from the start. Then every object it writes there carries the stamp as its token
(``pando.dev/written-under``), and the admission policy ``pando-runtime-fence``
(deploy/admission.yaml) refuses a write whose token is not the namespace's stamp: the old
owner's stuck write is refused when it lands, as :class:`NotOwner` naming the new owner.

A replica's stamp is kept for its tenure of the bundle (:meth:`Membership.tenure`: while it
owns the bundle without a break); it is dropped when a write is refused or not owned, and
read and moved again on the next guarded call. Cost: one read and one conditional write per
bundle gained (one read only for a bundle it creates), counted in :attr:`Fences.stamps`; a
write under an override stamps every time; a host that never joins does neither, and its
writes carry nothing. Logs on
``pando_runtime.kubernetes.fencing``: INFO per stamp, WARNING per refused write.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import attrs

from pando_runtime import Membership, NotOwner
from pando_runtime.plugin import MembershipSlot

from .._log import logger
from .._names import ANN_FENCE, ANN_WRITTEN_UNDER, LABEL_MANAGED_BY, MANAGED_BY, namespace_for
from ..api._paths import api_path
from ..session._errors import WriteConflict
from ..session._fence_token import FenceToken, creation_stamp, next_stamp, stamp_of, writing_under
from ..session._session import ClusterSession

__all__ = ["FENCE_MANAGER", "Fences"]

_LOG = logger("fencing")

FENCE_MANAGER = "pando-runtime-fence"
"""The field manager of the stamp: never the manager of an apply, so no apply removes it."""

MERGE_PATCH = "application/merge-patch+json"


@attrs.frozen(slots=True, eq=False)
class _Held:
    """A stamp this replica wrote, and what it was written under."""

    membership: Membership
    tenure: int | None
    token: FenceToken


class Fences:
    """The stamps of the bundles this replica writes as a member, and the guard of those writes."""

    def __init__(self, session: ClusterSession, slot: MembershipSlot) -> None:
        self._session = session
        self._slot = slot
        self._held: dict[str, _Held] = {}
        self.stamps = 0
        """Stamps written so far (one per bundle gained, on its first guarded call)."""
        self.refusals = 0
        """Writes the API server refused so far because the stamp had moved on."""

    @contextlib.asynccontextmanager
    async def guarding(self, bundle_id: str) -> AsyncIterator[None]:
        """Check ownership; within the block, a member's writes of the bundle carry its stamp.

        Not joined: only the (empty) check; nothing is read, written or added.
        """
        ns = namespace_for(bundle_id)
        membership = self._slot.current
        try:
            # The slot counts the block as a write in flight: a handover waits for it.
            async with self._slot.writing(bundle_id):
                if membership is None:
                    yield
                    return
                token = await self._token(ns, bundle_id, membership)
                try:
                    with writing_under(token):
                        yield
                except NotOwner as refused:
                    self.refusals += 1
                    _LOG.warning(
                        "replica %s: a write of %s was refused: the app is stamped %s now, not %s",
                        membership.replica,
                        bundle_id,
                        refused.details.get("stamp"),
                        token.stamp,
                        extra={"bundle_id": bundle_id, "replica": membership.replica},
                    )
                    details = {
                        **refused.details,
                        "replica": membership.replica,
                        "bundle_id": bundle_id,
                    }
                    raise NotOwner(refused.message, details=details) from refused
        except NotOwner:
            self._held.pop(ns, None)  # the next write reads the stamp again
            raise

    async def _token(self, ns: str, bundle_id: str, membership: Membership) -> FenceToken:
        held = self._held.get(ns)
        tenure = membership.tenure(bundle_id)  # None: written under an override
        if (
            held is not None
            and held.membership is membership
            and tenure is not None
            and held.tenure == tenure
        ):
            return held.token
        token = await self._stamp(ns, bundle_id, membership.replica)
        self._held[ns] = _Held(membership, tenure, token)
        return token

    async def _stamp(self, ns: str, bundle_id: str, replica: str) -> FenceToken:
        """Move the namespace's stamp to the next epoch, for ``replica`` (see the module)."""
        path = api_path(None, "namespaces", ns)
        what = f"stamp namespace {ns}"
        for _ in range(3):
            body = await self._session.api.find(path, f"read the stamp of {ns}")
            labels = ((body or {}).get("metadata") or {}).get("labels") or {}
            if body is None or labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
                # Absent: its create carries the stamp. Not ours: the apply refuses it.
                return FenceToken(ns, creation_stamp(replica))
            seen = stamp_of(body)
            stamp = next_stamp(seen, replica)
            patch = {"metadata": {"annotations": {ANN_FENCE: stamp, ANN_WRITTEN_UNDER: stamp}}}
            try:
                answer = await self._session.writer.write_if(
                    what,
                    path,
                    patch,
                    version=str(body["metadata"]["resourceVersion"]),
                    method="PATCH",
                    content_type=MERGE_PATCH,
                    query={"fieldManager": FENCE_MANAGER},
                )
            except WriteConflict:
                now = stamp_of(await self._session.api.find(path, f"read the stamp of {ns}"))
                if now is not None and now != seen:  # another replica stamped first: it won
                    raise self._session.errors.fenced(now, what) from None
                continue  # the namespace changed otherwise: read it again
            self.stamps += 1
            self._session.cache.remember(answer)
            _LOG.info(
                "replica %s stamped %s (bundle %s) %s, after %s",
                replica,
                ns,
                bundle_id,
                stamp,
                seen or "no stamp",
                extra={"bundle_id": bundle_id, "replica": replica},
            )
            return FenceToken(ns, stamp)
        raise self._session.errors.down(f"cannot {what}: it keeps changing", remedy="Apply again.")
