"""App namespaces: made, owned, converged, deleted; and each app's plan key.

An app lives in namespace ``pando-<bundle id>`` with its namespace-wide objects (RoleBinding,
default ServiceAccount, the NetworkPolicy of its ingress and egress, ResourceQuota, and the
egress gateway's Service, ConfigMap and policy when its rules name hosts), written only when
their digest on the namespace changed. Each exposed workload has a NetworkPolicy of its own
admitting the host's proxy and the edge on its ports; the namespace names those workloads,
each with the digest of its policy, so that exposing, hiding or changing a workload writes
only its policy and the namespace, and a policy no longer wanted is deleted by name. A
namespace kept for volumes alone is marked volumes-only. The per-app HMAC key that enters the
plan digests lives in a Secret of the namespace; it is read once per process and remembered
here, the one owner of those keys.
"""

from __future__ import annotations

import base64
import secrets

import attrs

from pando_runtime import AdapterFailed, BundlePlan

from .._info import KubernetesConfig
from .._names import KEY_SECRET, LABEL_MANAGED_BY, MANAGED_BY, exposure_policy_name
from ..api._paths import api_path
from ..cache._projections import NamespaceFacts, project_namespace
from ..manifests import _namespace_objects as ns_objects
from ..manifests import _objects as objects
from ..manifests._network import AppNetwork
from ..session._session import ClusterSession

__all__ = ["AppNamespaces"]


def check_owner(ns: str, bundle_id: str, facts: NamespaceFacts) -> None:
    """Refuse a namespace that belongs to something else or is being deleted."""
    if facts.bundle_id != bundle_id:
        raise AdapterFailed(
            f"namespace {ns} exists and belongs to something else",
            remedy="Remove or rename that namespace, or use another bundle id.",
            details={"namespace": ns},
        )
    if facts.terminating:
        raise AdapterFailed(
            f"namespace {ns} is being deleted",
            remedy="Wait until it is gone, then apply again.",
            details={"namespace": ns},
        )


class AppNamespaces:
    """The app namespaces of one cluster, and the plan keys kept in them."""

    def __init__(
        self, session: ClusterSession, config: KubernetesConfig, network: AppNetwork
    ) -> None:
        self._session = session
        self._config = config
        self._network = network
        self._keys: dict[str, bytes] = {}
        self._outside = ns_objects.outside_peers(
            config.server_namespace, config.server_labels, config.edge_namespace
        )

    async def _ensure(
        self,
        ns: str,
        plan: BundlePlan,
        facts: NamespaceFacts | None,
        *,
        volumes_only: bool,
    ) -> NamespaceFacts:
        if facts is not None:
            check_owner(ns, plan.bundle_id, facts)
            return facts
        session = self._session
        body = ns_objects.namespace(ns, plan, volumes_only=volumes_only)
        # Cluster-wide: no RoleBinding grants it later, so a refusal is final.
        created, existing = await session.writer.create_or_find(
            body, f"create namespace {ns}", retry_forbidden=False
        )
        if created and existing is not None:
            self._keys.pop(ns, None)  # a new namespace never has an old key
            return project_namespace(existing)
        if existing is None:  # deleted between the refused create and the read
            raise session.errors.down(f"namespace {ns} is being replaced", remedy="Apply again.")
        labels = (existing.get("metadata") or {}).get("labels") or {}
        found = project_namespace(existing)
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
            found = attrs.evolve(found, bundle_id=None)
        check_owner(ns, plan.bundle_id, found)
        session.cache.remember(existing)
        return found

    async def converge(
        self, ns: str, plan: BundlePlan, *, volumes_only: bool = False
    ) -> tuple[NamespaceFacts | None, NamespaceFacts]:
        """The namespace, its namespace-wide objects and exposure policies: (as found, as now).

        Each part is written only when its digest on the namespace changed; an app that
        exposes nothing costs what it did before exposure policies existed.
        """
        c = self._config
        known = await self._session.reads.namespace(ns)
        facts = await self._ensure(ns, plan, known, volumes_only=volumes_only)
        wanted_objects = ns_objects.namespace_objects(
            ns,
            plan,
            subject=c.app_subject,
            role=c.app_role,
            egress=self._network.policy_rules(plan.network.egress),
        )
        wanted_objects += self._network.gateway_objects(
            ns, plan.bundle_id, plan.network.egress, objects.labels_for(plan.bundle_id)
        )
        ns_body = ns_objects.namespace(ns, plan, volumes_only=volumes_only)
        ns_digest = ns_objects.namespace_digest(ns_body, wanted_objects)
        policies = ns_objects.exposure_policies(ns, plan, self._outside)
        marks = ns_objects.exposure_marks(policies)
        had, wanted = ns_objects.read_marks(facts.exposed), ns_objects.read_marks(marks)
        base = wanted_objects if facts.digest != ns_digest else []
        changed = [
            body
            for body, (workload, digest) in zip(policies, wanted.items(), strict=True)
            if had.get(workload) != digest
        ]
        # In a namespace never converged the RoleBinding goes first: it grants the rest.
        # Otherwise exposure goes first, so that a workload the namespace's policy stops
        # admitting from outside (after an upgrade) is admitted by its own without a gap.
        for body in [*base, *changed] if facts.digest is None else [*changed, *base]:
            await self._session.writer.apply(body)
        for workload in sorted(had.keys() - wanted.keys()):
            await self._delete_exposure(ns, workload)
        if facts.digest != ns_digest or had != wanted:
            await self._session.writer.apply(
                ns_objects.namespace(ns, plan, ns_digest, volumes_only=volumes_only, exposed=marks)
            )
        return known, facts

    async def _delete_exposure(self, ns: str, workload: str) -> None:
        await self._session.writer.delete(
            ns, "networkpolicies", exposure_policy_name(workload), "networking.k8s.io/v1"
        )

    async def mark_volumes_only(self, ns: str, bundle_id: str, facts: NamespaceFacts) -> None:
        """Mark the namespace volumes-only (observe reports the app gone); drop its exposure.

        The namespace still names the exposed workloads (without their digests) until the
        next converge, so a policy an interrupted destroy left is deleted (or rewritten) then.
        """
        empty = BundlePlan(bundle_id=bundle_id, workloads=())
        workloads = list(ns_objects.read_marks(facts.exposed))
        unknown = tuple(f"{workload}=" for workload in workloads)
        await self._session.writer.apply(
            ns_objects.namespace(ns, empty, volumes_only=True, exposed=unknown)
        )
        for workload in workloads:
            await self._delete_exposure(ns, workload)

    async def ensure_for_volumes(self, ns: str, bundle_id: str | None) -> None:
        """Make sure a volume's namespace exists (a volumes-only one when the app is not there)."""
        if bundle_id is None or ns == self._config.edge_namespace:
            return
        facts = await self._session.reads.namespace(ns)
        if facts is not None and not facts.terminating and facts.bundle_id == bundle_id:
            return
        await self.converge(ns, BundlePlan(bundle_id=bundle_id, workloads=()), volumes_only=True)

    async def drop_if_only_volumes(self, ns: str) -> None:
        """Delete a volumes-only namespace once its last volume is gone."""
        if ns == self._config.edge_namespace:
            return
        facts = await self._session.reads.namespace(ns)
        if facts is None or facts.terminating or not facts.volumes_only:
            return
        if any(not c.deleting for c in await self._session.reads.claims(ns)):
            return
        await self.delete(ns, facts)

    async def delete(self, ns: str, facts: NamespaceFacts) -> None:
        """Delete the namespace (and with it everything in it); its key is forgotten."""
        await self._session.writer.delete(None, "namespaces", ns)
        self._keys.pop(ns, None)
        self._session.cache.deleting_namespace(facts)

    async def plan_key(self, ns: str, bundle_id: str, *, fresh: bool) -> bytes:
        """The per-app HMAC key: remembered, read once per process, or made.

        ``fresh``: the namespace was just created, so there is nothing to read.
        """
        if ns in self._keys:
            return self._keys[ns]
        session = self._session
        path = api_path(ns, "secrets", KEY_SECRET)
        what = f"read the plan key of {ns}"
        # Fresh: nothing to read. A refused read (just after the RoleBinding) counts as none:
        # the create below settles whether one exists.
        body = None if fresh else await session.api.find(path, what, forbidden_is_absent=True)
        if body is None:
            made = ns_objects.key_secret(ns, bundle_id, secrets.token_bytes(32))
            _, body = await session.writer.create_or_find(made, f"create the plan key of {ns}")
            if body is None:  # deleted between the refused create and the read
                raise session.errors.down(
                    f"the plan key of {ns} is being replaced", remedy="Apply again."
                )
        key = base64.b64decode(body["data"][objects.KEY_FIELD])
        self._keys[ns] = key
        return key
