"""The edge: a Deployment in its own namespace behind the only public Service the adapter makes.

An edge ``<name>`` is, in the edge namespace (``pando-edge``, made by the
installer with the adapter's RoleBinding): Deployment ``pando-edge-<name>``
(at least two replicas, spread softly over nodes, never below one available
during a rollout), a PodDisruptionBudget (one always available), a
LoadBalancer or NodePort Service (``externalTrafficPolicy: Local``), and
Secrets for its environment, its certificates and its digest key. Apply
writes nothing when the edge's HMAC digest (under that key: the environment
and private keys are not guessable from it) is what the Deployment carries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any

from pando_runtime import EdgePlan, EdgeState, InvalidConfig, VolumeHandle, unstructure
from pando_runtime.plugin import raise_problems, validate_edge

from .._info import KubernetesConfig
from .._names import (
    ANN_EDGE_DIGEST,
    ANN_EDGE_NAME,
    ANN_EDGE_VOLUMES,
    LABEL_EDGE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    ROLE_EDGE,
    edge_object_name,
)
from ..api._paths import api_path
from ..manifests._objects import b64, canonical
from ..manifests._security import container_security
from ..manifests._workload_objects import PodSettings, claim_volumes, place
from ..session._session import ClusterSession
from ._volumes import Volumes, volume_handle

__all__ = ["Edges", "edge_digest", "edge_objects", "pod_reason"]

NODE_PORTS = range(30000, 32768)
SERVICE_TYPES = ("LoadBalancer", "NodePort")
CERT_DIR = "/etc/pando-edge/certs"


def edge_digest(plan: EdgePlan, key: bytes, settings: Mapping[str, Any]) -> str:
    """HMAC-SHA256 of the plan (secrets included) and the settings it depends on."""
    return hmac.new(key, canonical([unstructure(plan), dict(settings)]), hashlib.sha256).hexdigest()


def _labels(name: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_EDGE: name}


def edge_objects(  # noqa: C901 - one flat builder
    plan: EdgePlan,
    *,
    namespace: str,
    digest: str,
    service_type: str,
    placement: PodSettings,
) -> list[dict[str, Any]]:
    """Secrets, PodDisruptionBudget, Service and Deployment of an edge, in apply order."""
    name = edge_object_name(plan.name)
    labels = _labels(name)
    selector = {LABEL_EDGE: name}

    def meta(object_name: str, **extra: Any) -> dict[str, Any]:
        return {"name": object_name, "namespace": namespace, "labels": dict(labels), **extra}

    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": meta(f"{name}-env"),
            "data": {k: b64(v.encode()) for k, v in sorted(plan.env.items())},
        }
    ]
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if plan.certificates:
        data: dict[str, str] = {}
        for cert in plan.certificates:
            data[f"{cert.name}.crt"] = b64(cert.cert_pem.encode())
            data[f"{cert.name}.key"] = b64(cert.key_pem.encode())
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": meta(f"{name}-certs"),
                "data": data,
            }
        )
        volumes.append({"name": "certs", "secret": {"secretName": f"{name}-certs"}})
        mounts.append({"name": "certs", "mountPath": CERT_DIR, "readOnly": True})
    claim_volumes(plan.mounts, volumes, mounts)
    docs.append(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta(name),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(selector)}},
        }
    )
    ports = []
    for port in plan.ports:
        entry: dict[str, Any] = {
            "name": f"p{port.published}-{port.protocol.value}",
            "port": port.published,
            "targetPort": port.target,
            "protocol": port.protocol.value.upper(),
        }
        if service_type == "NodePort" and port.published in NODE_PORTS:
            entry["nodePort"] = port.published
        ports.append(entry)
    if ports:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta(name),
                "spec": {
                    "type": service_type,
                    "externalTrafficPolicy": "Local",
                    "selector": dict(selector),
                    "ports": ports,
                },
            }
        )
    container: dict[str, Any] = {
        "name": "edge",
        "image": plan.image,
        "envFrom": [{"secretRef": {"name": f"{name}-env"}}],
        "securityContext": container_security(),
    }
    if plan.args:
        container["args"] = list(plan.args)
    if plan.ports:
        container["ports"] = [
            {"containerPort": p.target, "protocol": p.protocol.value.upper()} for p in plan.ports
        ]
    if mounts:
        container["volumeMounts"] = mounts
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": dict(selector)},
            }
        ],
    }
    if volumes:
        pod_spec["volumes"] = volumes
    place(pod_spec, placement)  # where app pods run: their RuntimeClass and node selector
    annotations = {
        ANN_EDGE_NAME: plan.name,
        ANN_EDGE_DIGEST: digest,
        ANN_EDGE_VOLUMES: ",".join(dict.fromkeys(m.volume_id for m in plan.mounts)),
    }
    docs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(name, annotations=annotations),
            "spec": {
                "replicas": max(2, plan.replicas),
                "selector": {"matchLabels": dict(selector)},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
                },
                "template": {
                    "metadata": {
                        # What app namespaces admit on exposed workloads' ports (with
                        # the managed-by label), see ``_objects.outside_peers``.
                        "labels": {**labels, LABEL_ROLE: ROLE_EDGE},
                        # A changed plan (its environment included) rolls the pods.
                        "annotations": {ANN_EDGE_DIGEST: digest},
                    },
                    "spec": pod_spec,
                },
            },
        }
    )
    return docs


def pod_reason(pod: Mapping[str, Any]) -> str:
    """Why one pod is not ready, in words."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    name = meta.get("name", "?")
    phase = status.get("phase") or "Pending"
    if meta.get("deletionTimestamp"):
        return f"pod {name} is terminating"
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"pod {name} is {phase}: {condition.get('message') or condition.get('reason')}"
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        waiting = state.get("waiting")
        if waiting:
            detail = waiting.get("message") or waiting.get("reason") or "waiting"
            return f"pod {name} is {phase}: container {container.get('name')} {detail}"
        terminated = state.get("terminated")
        if terminated:
            return (
                f"pod {name} is {phase}: container {container.get('name')} exited "
                f"with {terminated.get('exitCode')} ({terminated.get('reason')})"
            )
        if not container.get("ready"):
            return f"pod {name} is {phase}: container {container.get('name')} is not ready"
    return f"pod {name} is {phase}"


class Edges:
    """The edges of one cluster, in its edge namespace. The one owner of the edges' digest keys."""

    def __init__(self, session: ClusterSession, config: KubernetesConfig, volumes: Volumes) -> None:
        self._session = session
        self._config = config
        self._volumes = volumes
        self._keys: dict[str, bytes] = {}

    def _path(self, plural: str, group: str, name: str | None = None) -> str:
        return api_path(self._config.edge_namespace, plural, name, group)

    async def _key(self, name: str) -> bytes:
        if name in self._keys:
            return self._keys[name]
        secret = f"{name}-key"
        path = self._path("secrets", "", secret)
        body = await self._session.api.find(path, f"read the key of edge {name}")
        if body is not None:
            key = base64.b64decode(body["data"]["key"])
        else:
            key = secrets.token_bytes(32)
            made = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": secret,
                    "namespace": self._config.edge_namespace,
                    "labels": _labels(name),
                },
                "data": {"key": b64(key)},
            }
            await self._session.writer.apply(made)
        self._keys[name] = key
        return key

    async def _deployment(self, name: str) -> dict[str, Any] | None:
        body = await self._session.api.find(
            self._path("deployments", "apps/v1", name), f"read edge {name}"
        )
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        return body

    async def apply_edge(self, plan: EdgePlan) -> None:
        """Converge the edge; nothing is written when its digest is unchanged."""
        raise_problems(validate_edge(plan), f"edge {plan.name!r}")
        c = self._config
        service_type = c.edge_service_type
        if service_type not in SERVICE_TYPES:
            raise InvalidConfig(
                f"edge_service_type must be one of {', '.join(SERVICE_TYPES)}, not {service_type!r}"
            )
        name = edge_object_name(plan.name)
        settings: dict[str, Any] = {"service_type": service_type, "node_selector": c.node_selector}
        if c.runtime_class:  # only then: the digests of edges without one stay as they were
            settings["runtime_class"] = c.runtime_class
        digest = edge_digest(plan, await self._key(name), settings)
        current = await self._deployment(name)
        annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get(ANN_EDGE_DIGEST) == digest:
            return
        ns = c.edge_namespace
        for mount in plan.mounts:
            await self._volumes.ensure_claim(
                ns, mount.volume_id, bundle_id=None, name=mount.volume_id, size_bytes=None
            )
        docs = edge_objects(
            plan,
            namespace=ns,
            digest=digest,
            service_type=service_type,
            placement=PodSettings(c.runtime_class, c.node_selector),
        )
        wanted = {d["kind"] for d in docs}
        for doc in docs:
            await self._session.writer.apply(doc)
        if "Service" not in wanted:
            await self._session.writer.delete(ns, "services", name)
        if not plan.certificates:
            await self._session.writer.delete(ns, "secrets", f"{name}-certs")
        for mount in plan.mounts:
            await self._volumes.retain(ns, mount.volume_id)

    async def observe_edge(self, name: str) -> EdgeState:
        """Whether the edge serves; when not, why, in plain words."""
        object_name = edge_object_name(name)
        deployment = await self._deployment(object_name)
        if deployment is None:
            return EdgeState(
                name=name,
                present=False,
                running=False,
                detail=f"no edge named {name!r} is installed",
            )
        desired = int((deployment.get("spec") or {}).get("replicas") or 0)
        ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
        problems: list[str] = []
        if ready < desired:
            pods = await self._session.api.get(
                self._path("pods", ""),
                f"list the pods of edge {name}",
                labelSelector=f"{LABEL_EDGE}={object_name}",
            )
            for pod in pods.get("items") or ():
                conditions = (pod.get("status") or {}).get("conditions") or ()
                if not any(
                    c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
                ):
                    problems.append(pod_reason(pod))
            if not pods.get("items"):
                problems.append("no pod has been created yet")
        detail = f"{ready} of {desired} replicas ready"
        if problems:
            detail += ": " + "; ".join(sorted(problems))
        serving = ready >= 1
        service = await self._session.api.find(
            self._path("services", "", object_name), f"read the Service of edge {name}"
        )
        if service is not None and (service.get("spec") or {}).get("type") == "LoadBalancer":
            ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
            if not ingress:
                serving = False
                detail += "; the load balancer has no address yet"
        return EdgeState(name=name, present=True, running=serving, detail=detail)

    async def remove_edge(self, name: str) -> None:
        """Delete everything the edge made (its volumes stay: they are data)."""
        ns = self._config.edge_namespace
        object_name = edge_object_name(name)
        await self._session.writer.delete(ns, "deployments", object_name, "apps/v1")
        await self._session.writer.delete(ns, "poddisruptionbudgets", object_name, "policy/v1")
        await self._session.writer.delete(ns, "services", object_name)
        for suffix in ("env", "certs", "key"):
            await self._session.writer.delete(ns, "secrets", f"{object_name}-{suffix}")
        self._keys.pop(object_name, None)

    async def _edge_deployments(self) -> list[dict[str, Any]]:
        body = await self._session.api.get(
            self._path("deployments", "apps/v1"),
            "list the edges",
            labelSelector=f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_EDGE}",
        )
        return [
            d
            for d in body.get("items") or ()
            if not (d.get("metadata") or {}).get("deletionTimestamp")
        ]

    async def edges(self) -> tuple[str, ...]:
        """Names of the installed edges."""
        names = {
            ((d.get("metadata") or {}).get("annotations") or {}).get(ANN_EDGE_NAME, "")
            for d in await self._edge_deployments()
        }
        return tuple(sorted(n for n in names if n))

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """Handles of the volumes the edges mount, for backups."""
        ids: set[str] = set()
        for d in await self._edge_deployments():
            annotations = (d.get("metadata") or {}).get("annotations") or {}
            ids.update(v for v in (annotations.get(ANN_EDGE_VOLUMES) or "").split(",") if v)
        ns = self._config.edge_namespace
        return tuple(volume_handle(ns, v, None) for v in sorted(ids))
