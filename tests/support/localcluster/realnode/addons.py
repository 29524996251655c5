"""The API objects a real node needs beside it: its RuntimeClass, the ``kubernetes``
Service's endpoint for pods, and cluster DNS (CoreDNS as a pod on the node). Pure builders."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .configs import (
    CLUSTER_DNS_IP,
    REAL_NODE_LABEL,
    REAL_NODE_TAINT,
    RUNTIME_HANDLER,
    SANDBOX_HANDLER,
)
from .network import API_SERVER_IP, INTERNET_IPS

RUNTIME_CLASS = "pando-real"
"""Pods of this RuntimeClass land on the real nodes (its scheduling adds the node selector
and the toleration), as a platform sends pods to a sandboxed runtime."""
SANDBOX_RUNTIME_CLASS = "gvisor"
"""Pods of this RuntimeClass run under gVisor on the real nodes (handler ``runsc``), as an
operator installs one beside containerd's handler."""
DNS_NAMESPACE = "kube-system"
DNS_LABELS = {"k8s-app": "kube-dns"}
STANDIN_HOSTS = {
    "allowed.pando.test": INTERNET_IPS[0],
    "other.pando.test": INTERNET_IPS[1],
}
"""Names of the stand-in internet's hosts, answered by cluster DNS (no name leaves)."""


def runtime_class(node_value: str, *, sandboxed: bool = False) -> dict[str, Any]:
    """The RuntimeClass that places pods on the real nodes (``sandboxed``: under gVisor)."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": SANDBOX_RUNTIME_CLASS if sandboxed else RUNTIME_CLASS},
        "handler": SANDBOX_HANDLER if sandboxed else RUNTIME_HANDLER,
        "scheduling": {
            "nodeSelector": {REAL_NODE_LABEL: node_value},
            "tolerations": [{**REAL_NODE_TAINT, "operator": "Equal"}],
        },
    }


def kubernetes_endpoints(port: int) -> dict[str, Any]:
    """The ``kubernetes`` Service's endpoint (the API server runs with no endpoint
    reconciler): the relay's address on the stand-in outside network."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [API_SERVER_IP], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }


def corefile(cluster_domain: str, hosts: Mapping[str, str]) -> str:
    """CoreDNS's configuration: the cluster's names and the stand-in hosts, nothing else
    (no upstream: a name outside them gets no answer from anywhere)."""
    lines = "\n".join(f"      {ip} {name}" for name, ip in sorted(hosts.items()))
    return f""".:53 {{
    errors
    health :8080
    ready :8181
    kubernetes {cluster_domain} in-addr.arpa ip6.arpa {{
      pods insecure
      fallthrough in-addr.arpa ip6.arpa
    }}
    hosts {{
{lines}
      fallthrough
    }}
    cache 5
}}
"""


def coredns_objects(
    image: str, cluster_domain: str = "cluster.local", node_name: str | None = None
) -> list[dict[str, Any]]:
    """CoreDNS's account, rights, configuration, pod and the ``kube-dns`` Service; the pod on
    node ``node_name`` when given (so a test that cuts another node off keeps DNS)."""
    placement = {"nodeSelector": {"kubernetes.io/hostname": node_name}} if node_name else {}
    ns = DNS_NAMESPACE
    meta = {"name": "coredns", "namespace": ns}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "pando:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "pando:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "pando:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"Corefile": corefile(cluster_domain, STANDIN_HOSTS)},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**meta, "labels": dict(DNS_LABELS)},
            "spec": {
                "serviceAccountName": "coredns",
                "runtimeClassName": RUNTIME_CLASS,
                **placement,
                "dnsPolicy": "Default",
                "containers": [
                    {
                        "name": "coredns",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "ports": [
                            {"containerPort": 53, "protocol": "UDP", "name": "dns"},
                            {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}},
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}],
                    }
                ],
                "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": ns, "labels": dict(DNS_LABELS)},
            "spec": {
                "clusterIP": CLUSTER_DNS_IP,
                "selector": dict(DNS_LABELS),
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                ],
            },
        },
    ]
