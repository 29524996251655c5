"""Capacity from nodes and pods: what apps can still get, and the roomiest single node.

Pure functions over plain node and pod dicts, so the arithmetic is unit-tested
without a cluster. Eligible nodes are schedulable, Ready, carry no NoSchedule
or NoExecute taint and match the configured node selector; what is free is
their allocatable minus the requests of the pods on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, NamedTuple

import attrs

from pando_runtime.fleet import BundleRequests

from .._names import LABEL_MANAGED_BY, MANAGED_BY

__all__ = [
    "BundlePods",
    "NodeRoom",
    "Reservation",
    "cpu_millis",
    "eligible",
    "memory_bytes",
    "node_rooms",
    "parse_quantity",
    "pod_requests",
    "pod_reservation",
]

_SUFFIXES: dict[str, Decimal | int] = {
    "": 1,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: str | float) -> Decimal:
    """A Kubernetes quantity (``"250m"``, ``"8Gi"``, ``"1.5"``, ``"1e3"``) as a number."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    return Decimal(match.group(1)) * Decimal(_SUFFIXES[match.group(2)])


def cpu_millis(value: str | float | None) -> int:
    """CPU quantity in millicores (rounded up, as the scheduler does)."""
    if value is None:
        return 0
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def memory_bytes(value: str | float | None) -> int:
    """Memory quantity in bytes."""
    if value is None:
        return 0
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def eligible(node: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    """Whether app pods can land on ``node``."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or ()):
        return False
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or ()
    )
    if not ready:
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """CPU millis and memory bytes the scheduler reserves for ``pod``.

    The sum over containers, or the largest init container if that is more
    (init containers run one at a time, before the others), plus overhead.
    """
    spec = pod.get("spec") or {}

    def requested(container: Mapping[str, Any]) -> tuple[int, int]:
        requests = (container.get("resources") or {}).get("requests") or {}
        return cpu_millis(requests.get("cpu")), memory_bytes(requests.get("memory"))

    cpu = mem = 0
    for container in spec.get("containers") or ():
        c, m = requested(container)
        cpu, mem = cpu + c, mem + m
    for container in spec.get("initContainers") or ():
        c, m = requested(container)
        cpu, mem = max(cpu, c), max(mem, m)
    overhead = spec.get("overhead") or {}
    return cpu + cpu_millis(overhead.get("cpu")), mem + memory_bytes(overhead.get("memory"))


@attrs.frozen
class NodeRoom:
    """One eligible node: allocatable, and requests of pando and of other pods on it."""

    name: str
    cpu_millis: int
    memory_bytes: int
    other_cpu: int = 0
    other_memory: int = 0
    pando_cpu: int = 0
    pando_memory: int = 0
    by_namespace: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)

    def free(self, own_namespace: str | None = None) -> tuple[int, int]:
        """CPU and memory free on the node, ``own_namespace``'s pods counted as free."""
        own_cpu, own_memory = self.by_namespace.get(own_namespace or "", (0, 0))
        return (
            self.cpu_millis - self.other_cpu - self.pando_cpu + own_cpu,
            self.memory_bytes - self.other_memory - self.pando_memory + own_memory,
        )


BundlePods = BundleRequests
"""What a bundle's live pods request, as one cluster's cache sees them: the fleet's
:class:`~pando_runtime.fleet.BundleRequests`. ``placed``: on a node (the cluster's room counts
them); ``waiting``: not on a node yet (written, so every replica's cache sees them, but no
node's room counts them)."""


class Reservation(NamedTuple):
    """What one live, placed pod holds of its node."""

    node_name: str
    namespace: str
    managed: bool
    cpu_millis: int
    memory_bytes: int


def pod_reservation(pod: Mapping[str, Any]) -> Reservation | None:
    """What ``pod`` reserves, or ``None`` when it holds nothing (not placed, or finished)."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    meta = pod.get("metadata") or {}
    managed = (meta.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY
    return Reservation(node_name, meta.get("namespace", ""), managed, *pod_requests(pod))


def node_rooms(
    nodes: Iterable[Mapping[str, Any]],
    reservations: Iterable[Reservation],
    selector: Mapping[str, str],
) -> list[NodeRoom]:
    """Every eligible node with what the live pods on it reserve."""
    rooms: dict[str, dict[str, Any]] = {}
    for node in nodes:
        if not eligible(node, selector):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        rooms[(node.get("metadata") or {}).get("name", "")] = {
            "cpu_millis": cpu_millis(allocatable.get("cpu")),
            "memory_bytes": memory_bytes(allocatable.get("memory")),
            "other_cpu": 0,
            "other_memory": 0,
            "pando_cpu": 0,
            "pando_memory": 0,
            "by_namespace": {},
        }
    for node_name, ns, managed, cpu, mem in reservations:
        room = rooms.get(node_name)
        if room is None:
            continue
        if managed:
            room["pando_cpu"] += cpu
            room["pando_memory"] += mem
            used = room["by_namespace"].get(ns, (0, 0))
            room["by_namespace"][ns] = (used[0] + cpu, used[1] + mem)
        else:
            room["other_cpu"] += cpu
            room["other_memory"] += mem
    return [NodeRoom(name=name, **values) for name, values in sorted(rooms.items())]
