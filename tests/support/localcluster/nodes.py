"""Fake (kwok-managed) nodes: what the harness creates through the API server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
"""kwok manages nodes carrying ``kwok.x-k8s.io/node=fake`` (its annotation selector)."""
METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"
"""Where metrics-server scrapes a node; kwok serves every node's metrics on one port."""

Taint = Mapping[str, str]
"""A taint as a mapping with ``key``, optional ``value`` and ``effect`` (e.g. NoSchedule)."""


@dataclass(frozen=True)
class NodeSpec:
    """Size, labels and taints of one fake node."""

    name: str
    cpu: str = "4"
    memory: str = "8Gi"
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()

    def manifest(self) -> dict[str, Any]:
        """The Node object to POST; kwok's node-initialize stage keeps this capacity."""
        labels = {
            "type": "kwok",
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/role": "agent",
            "node-role.kubernetes.io/agent": "",
            **self.labels,
        }
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        spec: dict[str, Any] = {}
        if self.taints:
            spec["taints"] = [dict(t) for t in self.taints]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {
                    KWOK_ANNOTATION: "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                    METRICS_PATH_ANNOTATION: f"/metrics/nodes/{self.name}/metrics/resource",
                },
            },
            "spec": spec,
            "status": {"allocatable": resources, "capacity": dict(resources)},
        }


DEFAULT_NODES = (NodeSpec("kwok-node-0"), NodeSpec("kwok-node-1"))
"""Two nodes of 4 CPU, 8Gi memory and 110 pods each."""
