"""The Kubernetes objects of an app, as plain dicts, and the digests that make apply idempotent.

Builders are pure: same plan in, same bodies out, so server-side apply is a
no-op when nothing changed and the digests below can tell "changed" without
asking the API server. A pod's ``pando.dev/plan-digest`` covers everything the
pod runs; the environment enters it only as an HMAC under a per-app random key
(kept on a Secret), so neither a pod nor an annotation reveals or lets anyone
guess a value.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from pando_runtime import (
    BundlePlan,
    HealthCheck,
    Problem,
    RegistryAuth,
    WorkloadPlan,
    unstructure,
)

from .._names import (
    ANN_BUNDLE_ID,
    ANN_CREATED,
    ANN_EXPOSED,
    ANN_NS_DIGEST,
    ANN_PLAN_DIGEST,
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
    claim_name,
    configmap_name,
    env_secret_name,
    exposure_policy_name,
    pod_name,
)

__all__ = [
    "PodSettings",
    "b64",
    "canonical",
    "default_service_account",
    "env_secret",
    "exposed_workloads",
    "exposure_marks",
    "exposure_policies",
    "exposure_policy",
    "files_configmap",
    "key_secret",
    "labels_for",
    "namespace",
    "namespace_digest",
    "namespace_objects",
    "network_policy",
    "outside_peers",
    "pod",
    "pull_auth_conflicts",
    "pull_secret",
    "read_marks",
    "resource_quota",
    "role_binding",
    "service",
    "workload_digest",
]

FILES_VOLUME = "pando-files"
KEY_FIELD = "key"


def canonical(value: Any) -> bytes:
    """Stable JSON bytes of ``value`` (sorted keys, no spaces): what digests hash."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def b64(data: bytes) -> str:
    """Base64 text of ``data`` (Secret and ConfigMap values)."""
    return base64.b64encode(data).decode()


_b64 = b64


def labels_for(
    bundle_id: str, workload: str | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Labels of an object of ``bundle_id`` (and ``workload``); ours win over the plan's."""
    labels = dict(extra or {})
    labels[LABEL_MANAGED_BY] = MANAGED_BY
    labels[LABEL_BUNDLE] = bundle_label(bundle_id)
    if workload is not None:
        labels[LABEL_WORKLOAD] = workload
    return labels


def _meta(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# -- namespace-wide objects -------------------------------------------------------------------


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
        "metadata": _meta(name, None, labels, annotations),
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
        "metadata": _meta(ROLE_BINDING, ns, labels_for(bundle_id)),
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
        "metadata": _meta(NETWORK_POLICY, ns, labels_for(bundle_id)),
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
        "metadata": _meta(exposure_policy_name(w.name), ns, labels_for(bundle_id, w.name)),
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
        "metadata": _meta(QUOTA, ns, labels_for(bundle_id)),
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
        "metadata": _meta(DEFAULT_SERVICE_ACCOUNT, ns, labels_for(bundle_id)),
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
        "metadata": _meta(KEY_SECRET, ns, labels_for(bundle_id)),
        "data": {KEY_FIELD: _b64(key)},
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
            entry["auth"] = _b64(f"{auth.username}:{auth.password}".encode())
        if auth.identity_token is not None:
            entry["identitytoken"] = auth.identity_token
        config[auth.registry] = entry
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": _meta(PULL_SECRET, ns, labels_for(bundle_id)),
        "data": {".dockerconfigjson": _b64(canonical({"auths": config}))},
    }


# -- per workload -----------------------------------------------------------------------------


def env_secret(ns: str, bundle_id: str, w: WorkloadPlan) -> dict[str, Any]:
    """The workload's environment, handed to the pod by ``envFrom`` (never in the pod spec)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(env_secret_name(w.name), ns, labels_for(bundle_id, w.name)),
        "data": {k: _b64(v.encode()) for k, v in sorted(w.env.items())},
    }


def files_configmap(ns: str, bundle_id: str, w: WorkloadPlan) -> dict[str, Any]:
    """The workload's carried files, one key each (``f0``, ``f1``...), mounted by subPath."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(configmap_name(w.name), ns, labels_for(bundle_id, w.name)),
        "binaryData": {f"f{i}": _b64(f.content) for i, f in enumerate(w.files)},
    }


def service(ns: str, bundle_id: str, w: WorkloadPlan) -> dict[str, Any]:
    """A headless Service named after the workload: stable DNS, never a node port."""
    ports = [
        {
            "name": f"p{p.number}-{p.protocol.value}",
            "port": p.number,
            "targetPort": p.number,
            "protocol": p.protocol.value.upper(),
        }
        for p in w.ports
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(w.name, ns, labels_for(bundle_id, w.name)),
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_BUNDLE: bundle_label(bundle_id), LABEL_WORKLOAD: w.name},
            "ports": ports,
        },
    }


class PodSettings:
    """What the adapter's config adds to every pod (and so to every digest)."""

    __slots__ = ("node_selector", "runtime_class")

    def __init__(
        self, runtime_class: str | None = None, node_selector: Mapping[str, str] | None = None
    ) -> None:
        self.runtime_class = runtime_class
        self.node_selector = dict(node_selector or {})


def workload_digest(
    w: WorkloadPlan, key: bytes, settings: PodSettings, proxy: Mapping[str, str] | None = None
) -> str:
    """sha256 of what the pod runs; the environment only as an HMAC under ``key``.

    ``proxy``: the egress gateway's variables (in the digest only when there are some, so
    pods of apps without a gateway keep their digests).
    """
    env_mac = hmac.new(key, canonical(sorted(w.env.items())), hashlib.sha256).hexdigest()
    doc = {
        "image": w.image,
        "command": list(w.command),
        "entrypoint": list(w.entrypoint),
        "working_dir": w.working_dir,
        "ports": [[p.number, p.protocol.value] for p in w.ports],
        "mounts": [[m.volume_id, m.path, m.read_only] for m in w.mounts],
        "files": [[f.path, f.mode, hashlib.sha256(f.content).hexdigest()] for f in w.files],
        "health": unstructure(w.health) if w.health else None,
        "resources": [w.resources.cpu_millis, w.resources.memory_bytes],
        "runtime_class": settings.runtime_class,
        "node_selector": settings.node_selector,
        "pull": w.pull_auth is not None,
        "env": env_mac,
    }
    if proxy:
        doc["proxy"] = dict(sorted(proxy.items()))
    return hashlib.sha256(canonical(doc)).hexdigest()


def _probe(health: HealthCheck) -> dict[str, Any]:
    probe: dict[str, Any] = {
        "periodSeconds": max(1, math.ceil(health.interval_seconds)),
        "timeoutSeconds": max(1, math.ceil(health.timeout_seconds)),
        "failureThreshold": health.retries,
        "successThreshold": 1,
    }
    if health.command:
        probe["exec"] = {"command": list(health.command)}
    else:
        probe["httpGet"] = {"path": health.http_path, "port": health.port}
    return probe


def _resources(w: WorkloadPlan) -> dict[str, Any]:
    amounts: dict[str, str] = {}
    if w.resources.cpu_millis is not None:
        amounts["cpu"] = f"{w.resources.cpu_millis}m"
    if w.resources.memory_bytes is not None:
        amounts["memory"] = str(w.resources.memory_bytes)
    # requests = limits: what the scheduler reserves is what the workload may use.
    return {"requests": amounts, "limits": dict(amounts)} if amounts else {}


class _VolumeMount(Protocol):
    @property
    def volume_id(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def read_only(self) -> bool: ...


def claim_volumes(
    wanted: Iterable[_VolumeMount], volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]
) -> None:
    """Add a pod volume per claimed volume (once each) and a container mount per ``wanted``."""
    claims: dict[str, str] = {}
    for mount in wanted:
        if mount.volume_id not in claims:
            claims[mount.volume_id] = f"v{len(claims)}"
            volumes.append(
                {
                    "name": claims[mount.volume_id],
                    "persistentVolumeClaim": {"claimName": claim_name(mount.volume_id)},
                }
            )
        mounts.append(
            {"name": claims[mount.volume_id], "mountPath": mount.path, "readOnly": mount.read_only}
        )


def app_container(
    name: str,
    image: str,
    *,
    entrypoint: Sequence[str] | None,
    command: Sequence[str] | None,
    working_dir: str | None,
) -> dict[str, Any]:
    """The container running an app's image (a workload's or a trial's).

    Its environment comes from the Secret of ``name``; no privilege escalation; the image's
    own entrypoint, arguments and directory unless given.
    """
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "envFrom": [{"secretRef": {"name": env_secret_name(name)}}],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if entrypoint:
        container["command"] = list(entrypoint)
    if command:
        container["args"] = list(command)
    if working_dir:
        container["workingDir"] = working_dir
    return container


def place(spec: dict[str, Any], settings: PodSettings) -> None:
    """Put an app pod where the settings say: their RuntimeClass and node selector."""
    if settings.runtime_class:
        spec["runtimeClassName"] = settings.runtime_class
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)


def pod(
    ns: str,
    bundle_id: str,
    w: WorkloadPlan,
    digest: str,
    settings: PodSettings,
    *,
    pull: bool,
    plan_labels: Mapping[str, str] | None = None,
    created_ns: int | None = None,
    replaces: str | None = None,
    proxy: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A bare pod: never restarted, readiness probe only, no token, no host access.

    ``replaces``: the uid of the instance this pod replaces (it names the pod). ``proxy``:
    the egress gateway's variables, set in the spec (they hold no secret).
    """
    container = app_container(
        w.name, w.image, entrypoint=w.entrypoint, command=w.command, working_dir=w.working_dir
    )
    if proxy:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(proxy.items())]
    if w.ports:
        container["ports"] = [
            {"containerPort": p.number, "protocol": p.protocol.value.upper()} for p in w.ports
        ]
    if w.health is not None:
        container["readinessProbe"] = _probe(w.health)
    resources = _resources(w)
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostname": w.name[:63],
        "containers": [container],
    }
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if w.files:
        volumes.append(
            {
                "name": FILES_VOLUME,
                "configMap": {
                    "name": configmap_name(w.name),
                    "items": [
                        {"key": f"f{i}", "path": f"f{i}", "mode": f.mode}
                        for i, f in enumerate(w.files)
                    ],
                },
            }
        )
        mounts += [
            {"name": FILES_VOLUME, "mountPath": f.path, "subPath": f"f{i}", "readOnly": True}
            for i, f in enumerate(w.files)
        ]
    claim_volumes(w.mounts, volumes, mounts)
    if volumes:
        spec["volumes"] = volumes
        container["volumeMounts"] = mounts
    if pull:
        spec["imagePullSecrets"] = [{"name": PULL_SECRET}]
    place(spec, settings)
    annotations = {
        ANN_PLAN_DIGEST: digest,
        ANN_BUNDLE_ID: bundle_id,
        ANN_CREATED: str(created_ns if created_ns is not None else time.time_ns()),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(
            pod_name(w.name, digest, replaces),
            ns,
            labels_for(bundle_id, w.name, plan_labels),
            annotations,
        ),
        "spec": spec,
    }
