"""A workload's objects, as plain dicts: its pod, Service, environment Secret and files.

Pure builders (see ``_objects``). A pod's ``pando.dev/plan-digest`` (``workload_digest``)
covers everything the pod runs; the environment enters it only as an HMAC under the app's
key, so neither a pod nor an annotation reveals or lets anyone guess a value.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from pando_runtime import (
    HealthCheck,
    WorkloadPlan,
    unstructure,
)

from .._names import (
    ANN_BUNDLE_ID,
    ANN_CREATED,
    ANN_PLAN_DIGEST,
    LABEL_BUNDLE,
    LABEL_WORKLOAD,
    PULL_SECRET,
    bundle_label,
    claim_name,
    configmap_name,
    env_secret_name,
    pod_name,
)
from ._objects import FILES_VOLUME, b64, canonical, labels_for, object_meta
from ._security import container_security, pod_security

__all__ = [
    "PodSettings",
    "app_container",
    "claim_volumes",
    "env_secret",
    "files_configmap",
    "place",
    "pod",
    "service",
    "workload_digest",
]


def env_secret(ns: str, bundle_id: str, w: WorkloadPlan) -> dict[str, Any]:
    """The workload's environment, handed to the pod by ``envFrom`` (never in the pod spec)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": object_meta(env_secret_name(w.name), ns, labels_for(bundle_id, w.name)),
        "data": {k: b64(v.encode()) for k, v in sorted(w.env.items())},
    }


def files_configmap(ns: str, bundle_id: str, w: WorkloadPlan) -> dict[str, Any]:
    """The workload's carried files, one key each (``f0``, ``f1``...), mounted by subPath."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(configmap_name(w.name), ns, labels_for(bundle_id, w.name)),
        "binaryData": {f"f{i}": b64(f.content) for i, f in enumerate(w.files)},
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
        "metadata": object_meta(w.name, ns, labels_for(bundle_id, w.name)),
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
    pods of apps without a gateway keep their digests). The security settings are in it:
    a pod written before they changed is replaced on its app's next apply.
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
        "security": [pod_security(), container_security(w.privileges.capabilities)],
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
    capabilities: Sequence[str] = (),
) -> dict[str, Any]:
    """The container running an app's image (a workload's or a trial's).

    Its environment comes from the Secret of ``name``; the hardened defaults plus
    ``capabilities`` (see ``_security``); the image's own entrypoint, arguments and
    directory unless given.
    """
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "envFrom": [{"secretRef": {"name": env_secret_name(name)}}],
        "securityContext": container_security(capabilities),
    }
    if entrypoint:
        container["command"] = list(entrypoint)
    if command:
        container["args"] = list(command)
    if working_dir:
        container["workingDir"] = working_dir
    return container


def place(spec: dict[str, Any], settings: PodSettings) -> None:
    """Put an app pod where the settings say, under the runtime's default seccomp profile.

    The settings name a RuntimeClass and a node selector.
    """
    spec["securityContext"] = pod_security()
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
    avoid_node: str | None = None,
) -> dict[str, Any]:
    """A bare pod: never restarted, readiness probe only, no token, no host access.

    ``replaces``: the uid of the instance this pod replaces (it names the pod). ``proxy``:
    the egress gateway's variables, set in the spec (they hold no secret). ``avoid_node``: a
    node the pod must not be placed on (the lost node of the instance it replaces).
    """
    container = app_container(
        w.name,
        w.image,
        entrypoint=w.entrypoint,
        command=w.command,
        working_dir=w.working_dir,
        capabilities=w.privileges.capabilities,
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
    if avoid_node:
        # The scheduler avoids a lost node by its taint, which may land just after the pod.
        term = {
            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [avoid_node]}]
        }
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    annotations = {
        ANN_PLAN_DIGEST: digest,
        ANN_BUNDLE_ID: bundle_id,
        ANN_CREATED: str(created_ns if created_ns is not None else time.time_ns()),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_meta(
            pod_name(w.name, digest, replaces),
            ns,
            labels_for(bundle_id, w.name, plan_labels),
            annotations,
        ),
        "spec": spec,
    }
