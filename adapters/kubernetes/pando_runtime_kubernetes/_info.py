"""What the Kubernetes adapter says about itself: its settings and its registry entry.

This module is the target of the ``pando_runtime.adapters`` entry point, so it
imports nothing heavy (attrs and the core only, never ``kubernetes``): listing
adapters must not pay for the Kubernetes client.
"""

from __future__ import annotations

from typing import Any

import attrs

from pando_runtime import AdapterInfo
from pando_runtime.plugin import LeaseStoreInfo, setting

__all__ = [
    "ADAPTER",
    "DESCRIPTION",
    "LEASE_STORE",
    "MULTI_ADAPTER",
    "MULTI_DESCRIPTION",
    "SOCKET_TIMEOUT_MAX",
    "KubernetesConfig",
    "MultiClusterConfig",
    "adapter_version",
]

DESCRIPTION = "Runs each app in its own Kubernetes namespace as bare pods."
MULTI_DESCRIPTION = (
    "Runs each app on one of several Kubernetes clusters, placed by room on its first deploy."
)


SOCKET_TIMEOUT_MAX = 86_400
"""The most seconds a timeout of a socket read or connect may be (a day): an API answer is
never waited for longer, and the operating system refuses socket timeouts not far above."""


def adapter_version() -> str:
    """The installed adapter's version (in the User-Agent; a warm store of another is ignored)."""
    import importlib.metadata  # noqa: PLC0415 - with the first transport, not the adapter's import

    try:
        return importlib.metadata.version("pando-runtime-kubernetes")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "unknown"


def _dns_labels() -> dict[str, str]:
    return {"k8s-app": "kube-dns"}


def _server_labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": "pando", "app.kubernetes.io/component": "server"}


@attrs.frozen(kw_only=True)
class KubernetesConfig:
    """Settings of the Kubernetes adapter (all optional)."""

    kubeconfig: str | None = setting(
        default=None,
        help="Path of a kubeconfig file (several: a list as in $KUBECONFIG, merged); "
        "unset: $KUBECONFIG, ~/.kube/config, then in-cluster.",
    )
    context: str | None = setting(
        default=None, help="Context (cluster) of the kubeconfig to use; unset: its current one."
    )
    api_qps: float = setting(
        default=50.0, exclusive_minimum=0, help="API requests per second, sustained."
    )
    api_burst: int = setting(default=100, minimum=1, help="API requests allowed in a burst.")
    max_threads: int = setting(default=16, minimum=1, help="Worker threads for blocking API calls.")
    max_streams: int = setting(
        default=16,
        minimum=1,
        help="Worker threads for long-lived streams (watches, followed logs).",
    )
    connect_timeout: float = setting(
        default=5.0,
        exclusive_minimum=0,
        maximum=SOCKET_TIMEOUT_MAX,
        help="Seconds to connect to the API server.",
    )
    read_timeout: float = setting(
        default=30.0,
        exclusive_minimum=0,
        maximum=SOCKET_TIMEOUT_MAX,
        help="Seconds to wait for an API answer.",
    )
    watch_timeout: int = setting(
        default=290,
        minimum=1,
        maximum=SOCKET_TIMEOUT_MAX,
        help="Seconds after which the API server ends a watch (it is reopened).",
    )
    rate_limit_wait: float = setting(
        default=10.0,
        minimum=0,
        help="Seconds a call may wait in all, as the API server's Retry-After says, when "
        "throttled (429) before it raises RateLimited (0: raise at once).",
    )
    cache_max_staleness: float = setting(
        default=30.0,
        exclusive_minimum=0,
        help="Seconds the cache may go unconfirmed (no watch event, bookmark or answered probe) "
        "while the API server cannot be reached before observe raises AdapterUnavailable.",
    )
    cache_probe_interval: float = setting(
        default=5.0,
        exclusive_minimum=0,
        help="Seconds of watch silence after which the cache asks the API server if it is there.",
    )
    cache_dir: str | None = setting(
        default=None,
        help="Directory where the cache is kept on disk (one SQLite file per cluster), so a "
        "restarted adapter resumes its watches instead of listing everything; unset: not kept.",
    )
    server_namespace: str = setting(
        default="pando",
        help="Namespace of the host's server pods (admitted to exposed workloads' ports).",
    )
    server_labels: dict[str, str] = setting(
        factory=_server_labels, help="Labels of the host's server pods."
    )
    app_subject: str | None = setting(
        default=None,
        help="Identity bound in each app namespace to app_role, as 'User:<name>' or "
        "'ServiceAccount:<namespace>:<name>'; unset: the adapter holds app_role cluster-wide.",
    )
    app_role: str = setting(
        default="pando-runtime-app", help="ClusterRole bound in each app namespace."
    )
    cluster_domain: str = setting(default="cluster.local", help="The cluster's DNS domain.")
    runtime_class: str | None = setting(
        default=None, help="RuntimeClass of every app pod (but sandboxed ones)."
    )
    sandbox_runtime_class: str | None = setting(
        default=None,
        help="RuntimeClass of the pods of sandboxed plans (isolation 'sandboxed'); unset: the "
        "cluster's first RuntimeClass whose handler is gVisor (runsc, runsc-*, gvisor*) or "
        "Kata (kata*).",
    )
    node_selector: dict[str, str] = setting(
        factory=dict, help="Node labels app pods must land on (also limits capacity)."
    )
    trust_network_policy: bool = setting(
        default=False,
        help="Trust that the cluster enforces NetworkPolicy instead of verifying it by a canary.",
    )
    trust_egress_policy: bool = setting(
        default=False,
        help="Trust that the cluster enforces NetworkPolicy egress rules instead of verifying "
        "it by the canary (restricted egress is offered only when enforced).",
    )
    pod_cidr: str | None = setting(
        default=None,
        help="The cluster's pod range(s), comma-separated; with service_cidr it replaces the "
        "private ranges app pods never reach (unset: every private, shared and link-local "
        "range is excluded).",
    )
    service_cidr: str | None = setting(
        default=None, help="The cluster's Service range(s), comma-separated (see pod_cidr)."
    )
    api_server_cidr: str | None = setting(
        default=None,
        help="The API server's address(es) as CIDR blocks, comma-separated: app pods never "
        "reach them (only the edge does).",
    )
    node_cidr: str | None = setting(
        default=None,
        help="The nodes' own addresses as CIDR blocks, comma-separated: app pods never reach "
        "them (kubelet, kube-proxy and whatever else listens on a node).",
    )
    dns_namespace: str = setting(
        default="kube-system", help="Namespace of the cluster DNS pods app pods may reach."
    )
    dns_labels: dict[str, str] = setting(
        factory=_dns_labels, help="Labels of the cluster DNS pods (port 53, UDP and TCP)."
    )
    egress_gateway_image: str | None = setting(
        default=None,
        help="Image of the egress gateway (needs squid on its PATH); unset: plans whose "
        "egress rules name hosts are refused, CIDR rules still work.",
    )
    canary_wait: float = setting(
        default=120.0,
        exclusive_minimum=0,
        help="Seconds the NetworkPolicy canary may take (unless trusted); it runs at the first "
        "capabilities(), plan restricting egress or health check.",
    )
    schedule_wait: float = setting(
        default=20.0,
        minimum=0,
        help="Seconds apply waits for a new pod to be scheduled (0: it does not wait, so an "
        "unschedulable pod is not reported by apply).",
    )
    dependency_wait: float = setting(
        default=120.0,
        minimum=0,
        help="Seconds apply waits for a workload's dependencies to be ready (0: it does not wait).",
    )
    stop_wait: float = setting(
        default=45.0,
        minimum=0,
        help="Seconds apply waits for the app's pods told to end (stop, destroy) to have ended, "
        "and a namespace being deleted to be gone, before it starts new ones; past it, "
        "StillStopping and nothing started (0: it refuses at once). Longer than a pod's grace "
        "period (30 s).",
    )
    field_manager: str = setting(default="pando-runtime", help="Server-side apply field manager.")
    storage_class: str | None = setting(
        default=None, help="StorageClass of volume claims; unset: the cluster's default class."
    )
    volume_size_bytes: int = setting(
        default=10 * 1024**3,
        minimum=1,
        help="Size of a volume whose request names none (bytes).",
    )
    volume_bind_wait: float = setting(
        default=10.0,
        minimum=0,
        help="Seconds create_volume waits for its claim to bind (to set the volume to Retain); "
        "a claim bound later (WaitForFirstConsumer) is set to Retain by the next apply or backup.",
    )
    helper_image: str = setting(
        default="busybox:1.37",
        help="Image of the volume helper and the trial observer (needs sh, tar, cat).",
    )
    helper_mount_root: str = setting(
        default="/data",
        help="Directory under which the volume helper mounts a claim (at <root>/<claim name>).",
    )
    helper_wait: float = setting(
        default=120.0,
        exclusive_minimum=0,
        help="Seconds to wait for a volume helper or trial pod to start.",
    )
    image_registry: str | None = setting(
        default=None,
        help="host:port of the image registry (HTTPS) import_image pushes to and app pods "
        "pull imported images from; unset: no import (registry delivery only).",
    )
    image_registry_repository: str = setting(
        default="pando",
        help="Repository prefix of imported images: <image_registry>/<prefix>/<name> ('': "
        "no prefix).",
    )
    image_registry_ca_file: str | None = setting(
        default=None,
        help="PEM file of the CA that signed the registry's certificate; unset: the system's "
        "trust store (the nodes must trust it too).",
    )
    image_registry_username: str | None = setting(
        default=None,
        help="User the adapter pushes and looks up images as (Basic authentication); unset: "
        "anonymous.",
    )
    image_registry_password_file: str | None = setting(
        default=None,
        help="File holding image_registry_username's password (read at each use; one "
        "trailing newline ignored).",
    )
    image_registry_pull_username: str | None = setting(
        default=None,
        help="User app pods pull images of the registry as (written into each such app's "
        "pull secret); unset: image_registry_username.",
    )
    image_registry_pull_password_file: str | None = setting(
        default=None,
        help="File holding image_registry_pull_username's password.",
    )
    edge_namespace: str = setting(
        default="pando-edge",
        help="Namespace of the edge (created by the installer, with the edge RoleBinding).",
    )
    edge_service_type: str = setting(
        default="LoadBalancer",
        help="Type of the edge's Service: LoadBalancer or NodePort (the only such Service made).",
    )


ADAPTER = AdapterInfo(
    name="kubernetes",
    description=DESCRIPTION,
    factory="pando_runtime_kubernetes._adapter:KubernetesAdapter",
    api_version="1.7",
    config_class=KubernetesConfig,
    distribution="pando-runtime-kubernetes",
)


@attrs.frozen(kw_only=True)
class MultiClusterConfig:
    """Settings of the multi-cluster adapter (all optional)."""

    kubeconfig: str | None = setting(
        default=None,
        help="Path of a kubeconfig file (several: a list as in $KUBECONFIG, merged); "
        "unset: $KUBECONFIG, ~/.kube/config, then in-cluster.",
    )
    contexts: list[str] | None = setting(
        default=None, help="Contexts (clusters) to run apps on; unset: every context found."
    )
    default_cluster: str | None = setting(
        default=None,
        help="Cluster of an app found nowhere that is not a first deploy (and of trial runs "
        "and the edge); unset: the current context.",
    )
    membership_cluster: str | None = setting(
        default=None,
        help="Cluster whose API server holds the host replicas' Leases (in its "
        "server_namespace), for the one membership of every cluster; unset: the default "
        "cluster.",
    )
    settings: dict[str, Any] = setting(
        factory=dict,
        help="Settings of the Kubernetes adapter for every cluster (any of its keys but "
        "kubeconfig and context).",
    )
    clusters: dict[str, dict[str, Any]] = setting(
        factory=dict,
        help="Settings per cluster name, over 'settings' (for example api_qps, api_burst, "
        "node_selector).",
    )
    remote_secrets_namespace: str | None = setting(
        default=None,
        help="Namespace of the default cluster whose Secrets labelled "
        "'istio/multiCluster: \"true\"' add clusters while the adapter runs (each data key a "
        "cluster's name, its value a kubeconfig); unset: the kubeconfig's clusters only.",
    )
    join_wait: float = setting(
        default=30.0,
        exclusive_minimum=0,
        help="Seconds a cluster that joins (or a cluster's new kubeconfig) has to start and "
        "sync before it counts as silent (it joined) or is dropped (a replacement: the old "
        "session serves on); an unreachable cluster never holds up the others.",
    )


MULTI_ADAPTER = AdapterInfo(
    name="kubernetes-multi",
    description=MULTI_DESCRIPTION,
    factory="pando_runtime_kubernetes._multi:MultiClusterAdapter",
    api_version="1.7",
    config_class=MultiClusterConfig,
    distribution="pando-runtime-kubernetes",
)


LEASE_STORE = LeaseStoreInfo(
    name="kubernetes",
    description="Leases as coordination.k8s.io Leases in the host's namespace (the adapter's own).",
    factory="pando_runtime_kubernetes.features._membership:kube_lease_store",
    api_version="1.7",
    config_class=KubernetesConfig,
    reads="the API server reads a list from etcd by quorum (no resourceVersion is given)",
    distribution="pando-runtime-kubernetes",
)
