"""A real local Kubernetes control plane for tests: etcd, kube-apiserver, controller-manager,
scheduler, kwok (simulated nodes and pods) and metrics-server, on 127.0.0.1, without Docker.

From Python::

    from localcluster import LocalCluster
    with LocalCluster() as cluster:
        ...  # cluster.kubeconfig, cluster.restricted_kubeconfig, cluster.add_node(...)

Faults: ``cluster.restart("kube-apiserver")`` (same flags and data), ``cluster.paused("etcd")``
(SIGSTOP for a block), and :func:`proxy_apiserver` puts a Toxiproxy in front of the API server.

From a shell: ``PYTHONPATH=tests/support python -m localcluster up|down|status``.
The pytest plugin is :mod:`localcluster.pytest_plugin`.
"""

from __future__ import annotations

from .audit import AuditRecord, read_audit_log
from .binaries import ENV_BIN, Binaries, find_binaries
from .cluster import CONTEXT, RESTARTABLE, LocalCluster
from .errors import BinariesNotFoundError, ClusterError, ClusterStartError, PkiError
from .kwok import (
    EXIT_CODE_ANNOTATION,
    EXIT_DELAY_ANNOTATION,
    USAGE_CPU_ANNOTATION,
    USAGE_MEMORY_ANNOTATION,
    cri_log_line,
)
from .nodes import DEFAULT_NODES, KWOK_ANNOTATION, NodeSpec
from .toxiproxy import (
    ENV_TOXIPROXY_BIN,
    ProxiedApiServer,
    Proxy,
    Toxiproxy,
    ToxiproxyError,
    ToxiproxyServer,
    find_toxiproxy,
    proxy_apiserver,
)

__all__ = [
    "CONTEXT",
    "DEFAULT_NODES",
    "ENV_BIN",
    "ENV_TOXIPROXY_BIN",
    "EXIT_CODE_ANNOTATION",
    "EXIT_DELAY_ANNOTATION",
    "KWOK_ANNOTATION",
    "RESTARTABLE",
    "USAGE_CPU_ANNOTATION",
    "USAGE_MEMORY_ANNOTATION",
    "AuditRecord",
    "Binaries",
    "BinariesNotFoundError",
    "ClusterError",
    "ClusterStartError",
    "LocalCluster",
    "NodeSpec",
    "PkiError",
    "ProxiedApiServer",
    "Proxy",
    "Toxiproxy",
    "ToxiproxyError",
    "ToxiproxyServer",
    "cri_log_line",
    "find_binaries",
    "find_toxiproxy",
    "proxy_apiserver",
    "read_audit_log",
]
