"""An app namespace's own objects, as plain dicts: the namespace, its policies, quota, secrets.

Pure builders (see ``_objects``): ``namespace_objects`` lists what a namespace holds besides
its workloads, and ``namespace_digest`` covers them, so an unchanged namespace is not written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pando_runtime import (
    BundlePlan,
    Problem,
    RegistryAuth,
    WorkloadPlan,
)

from .._names import (
    ANN_BUNDLE_ID,
    ANN_EXPOSED,
    ANN_NS_DIGEST,
    ANN_VOLUMES_ONLY,
    ANN_WORKLOADS,
    DEFAULT_SERVICE_ACCOUNT,
    KEY_SECRET,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    LABEL_WORKLOAD,
    MANAGED_BY,
    NETWORK_POLICY,
    PULL_SECRET,
    QUOTA,
    ROLE_BINDING,
    ROLE_EDGE,
    bundle_label,
    exposure_policy_name,
)
from ._objects import KEY_FIELD, b64, canonical, labels_for, object_meta

__all__ = [
    "default_service_account",
    "exposed_workloads",
    "exposure_marks",
    "exposure_policies",
    "exposure_policy",
    "key_secret",
    "namespace",
    "namespace_digest",
    "namespace_objects",
    "network_policy",
    "outside_peers",
    "pull_auth_conflicts",
    "pull_secret",
    "read_marks",
    "resource_quota",
    "role_binding",
]


def namespace(
    name: str,
    plan: BundlePlan,
    digest: str | None = None,
    *,
    volumes_only: bool = False,
    exposed: Sequence[str] = (),
) -> dict[str, Any]:
    """The app's namespace; ``digest`` (of the namespace-wide objects) once they are applied.

    ``volumes_only``: the app is not applied (or was destroyed); the namespace holds
    only its volumes, and observe reports the bundle as absent. ``exposed``: the marks of
    its exposure policies (:func:`exposure_marks`); none for an app that exposes nothing,
    whose namespace is written as it was before exposure policies existed.
    """
    annotations = {
        ANN_BUNDLE_ID: plan.bundle_id,
        ANN_WORKLOADS: ",".join(w.name for w in plan.workloads),
    }
    if digest is not None:
        annotations[ANN_NS_DIGEST] = digest
    if volumes_only:
        annotations[ANN_VOLUMES_ONLY] = "true"
    if exposed:
        annotations[ANN_EXPOSED] = ",".join(exposed)
    labels = labels_for(plan.bundle_id, extra=plan.labels)
    # Pod Security Admission: baseline forbids host namespaces, ports and privileges.
    labels["pod-security.kubernetes.io/enforce"] = "baseline"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": object_meta(name, None, labels, annotations),
    }


def role_binding(ns: str, bundle_id: str, subject: str, role: str) -> dict[str, Any]:
    """Binds the adapter's identity (``User:<n>`` / ``ServiceAccount:<ns>:<n>``) to ``role``."""
    kind, _, rest = subject.partition(":")
    if kind == "ServiceAccount":
        sa_ns, _, sa_name = rest.partition(":")
        subjects = [{"kind": "ServiceAccount", "namespace": sa_ns, "name": sa_name}]
    else:
        subjects = [{"kind": kind, "apiGroup": "rbac.authorization.k8s.io", "name": rest}]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(ROLE_BINDING, ns, labels_for(bundle_id)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }


def network_policy(
    ns: str, bundle_id: str, egress: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """Default deny ingress, admitting only the app's own pods.

    What comes from outside the app (the host's proxy, the edge) is admitted by the
    exposure policy of each exposed workload (:func:`exposure_policy`), on its ports only.
    ``egress``: the rules of what the namespace's pods may reach (see ``_egress``); the
    same policy then denies every other destination.
    """
    spec: dict[str, Any] = {
        "podSelector": {},
        "policyTypes": ["Ingress"] if egress is None else ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": {}}]}],
    }
    if egress is not None:
        spec["egress"] = [dict(rule) for rule in egress]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(NETWORK_POLICY, ns, labels_for(bundle_id)),
        "spec": spec,
    }


def outside_peers(
    server_namespace: str, server_labels: Mapping[str, str], edge_namespace: str
) -> list[dict[str, Any]]:
    """Who reaches an exposed workload from outside its app: the host's server pods, the edge.

    The edge's pods are those every edge Deployment labels (managed by pando, role ``edge``)
    in ``edge_namespace``; namespaces are matched by the name label the API server sets.
    """

    def peer(namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
        return {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "podSelector": {"matchLabels": dict(labels)},
        }

    edge_labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ROLE: ROLE_EDGE}
    return [peer(server_namespace, server_labels), peer(edge_namespace, edge_labels)]


def exposed_workloads(plan: BundlePlan) -> list[WorkloadPlan]:
    """The workloads reachable from outside the app: exposed, with a port to reach."""
    return [w for w in plan.workloads if w.exposed and w.ports]


def exposure_policy(
    ns: str, bundle_id: str, w: WorkloadPlan, peers: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Admits ``peers`` (:func:`outside_peers`) to the pods of ``w``, on its ports alone.

    Policies add up: beside the namespace's own (the app's pods, every port), this one
    selects the workload's pods by the labels its pods and Service carry.
    """
    ports = [
        {"protocol": p.protocol.value.upper(), "port": p.number} for p in dict.fromkeys(w.ports)
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(exposure_policy_name(w.name), ns, labels_for(bundle_id, w.name)),
        "spec": {
            "podSelector": {
                "matchLabels": {LABEL_BUNDLE: bundle_label(bundle_id), LABEL_WORKLOAD: w.name}
            },
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [dict(p) for p in peers], "ports": ports}],
        },
    }


def exposure_policies(
    ns: str, plan: BundlePlan, peers: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The exposure policy of each exposed workload with ports, by workload name."""
    exposed = sorted(exposed_workloads(plan), key=lambda w: w.name)
    return [exposure_policy(ns, plan.bundle_id, w, peers) for w in exposed]


def exposure_marks(policies: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """What the namespace records of its exposure policies: ``<workload>=<digest>`` each.

    The digest (64 bits of the policy's sha256) tells a policy that changed from one
    that did not, so an apply writes only the policies that changed.
    """
    return tuple(
        f"{p['metadata']['labels'][LABEL_WORKLOAD]}={hashlib.sha256(canonical(p)).hexdigest()[:16]}"
        for p in policies
    )


def read_marks(marks: Iterable[str]) -> dict[str, str]:
    """Marks (:func:`exposure_marks`) as ``{workload: digest}``."""
    return dict(mark.partition("=")[::2] for mark in marks)


def resource_quota(ns: str, bundle_id: str) -> dict[str, Any]:
    """Forbids NodePort and LoadBalancer Services: an app is reached only through the host."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": object_meta(QUOTA, ns, labels_for(bundle_id)),
        "spec": {"hard": {"services.nodeports": "0", "services.loadbalancers": "0"}},
    }


def default_service_account(ns: str, bundle_id: str) -> dict[str, Any]:
    """The namespace's ``default`` ServiceAccount, written by the adapter, never mounted.

    The API server admits a pod only once its ServiceAccount exists. The controller that
    makes ``default`` in a new namespace falls behind when namespaces come fast, and the
    API server then polls for it while the pod's create waits (and refuses the pod after
    about two seconds); writing it with the namespace-wide objects takes that wait away.
    """
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(DEFAULT_SERVICE_ACCOUNT, ns, labels_for(bundle_id)),
        "automountServiceAccountToken": False,
    }


def namespace_objects(
    ns: str,
    plan: BundlePlan,
    *,
    subject: str | None,
    role: str,
    egress: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The namespace-wide objects, in apply order (binding first: it grants the rest).

    ``egress``: the egress rules of the namespace's policy. The exposure policies are not
    among them (:func:`exposure_policies`: they have a digest of their own).
    """
    objects = []
    if subject:
        objects.append(role_binding(ns, plan.bundle_id, subject, role))
    objects.append(default_service_account(ns, plan.bundle_id))
    objects.append(network_policy(ns, plan.bundle_id, egress))
    objects.append(resource_quota(ns, plan.bundle_id))
    return objects


def namespace_digest(ns_body: Mapping[str, Any], objects: Sequence[Mapping[str, Any]]) -> str:
    """Digest of the namespace and its namespace-wide objects (not of the digest itself)."""
    return hashlib.sha256(canonical([ns_body, list(objects)])).hexdigest()


def key_secret(ns: str, bundle_id: str, key: bytes) -> dict[str, Any]:
    """The per-app random key under which environments are HMAC'd into digests."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": object_meta(KEY_SECRET, ns, labels_for(bundle_id)),
        "data": {KEY_FIELD: b64(key)},
    }


def pull_auth_conflicts(workloads: Sequence[WorkloadPlan]) -> list[Problem]:
    """Workloads that give one registry other credentials than an earlier workload did.

    An app's pull secret holds one credential per registry (the ``dockerconfigjson``
    format): a second, different one would silently replace the first.
    """
    first: dict[str, tuple[int, RegistryAuth]] = {}
    problems = []
    for i, w in enumerate(workloads):
        auth = w.pull_auth
        if auth is None:
            continue
        seen = first.setdefault(auth.registry, (i, auth))
        if seen[1] != auth:
            problems.append(
                Problem(
                    f"workloads[{i}].pull_auth",
                    f"other credentials for {auth.registry} than workloads[{seen[0]}] gives: "
                    "an app pulls from one registry with one credential",
                    "conflict",
                )
            )
    return problems


def pull_secret(ns: str, bundle_id: str, auths: Sequence[RegistryAuth]) -> dict[str, Any]:
    """A ``dockerconfigjson`` Secret with every registry credential of the plan."""
    config: dict[str, Any] = {}
    for auth in auths:
        entry: dict[str, str] = {}
        if auth.username is not None:
            entry["username"] = auth.username
        if auth.password is not None:
            entry["password"] = auth.password
        if auth.username is not None and auth.password is not None:
            entry["auth"] = b64(f"{auth.username}:{auth.password}".encode())
        if auth.identity_token is not None:
            entry["identitytoken"] = auth.identity_token
        config[auth.registry] = entry
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": object_meta(PULL_SECRET, ns, labels_for(bundle_id)),
        "data": {".dockerconfigjson": b64(canonical({"auths": config}))},
    }
