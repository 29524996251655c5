"""The fake runtime's scheduler: which node has room, and starting instances there.

Placement is first fit over the nodes in order, counting the planned resources of
every running instance (a bundle's own instances that keep running keep their
room), so capacity errors come before anything is written. Starting an instance
plays its image's :class:`ImageBehaviour`: a problem keeps it from running, an
exit code or an OOM ends it at once.
"""

from __future__ import annotations

import hashlib
import json

import attrs

from .._adapter._scope import scoped_read
from .._contract._capacity import Fit, roomiest
from .._contract._errors import CapacityExceeded, StillStopping
from .._contract._events import BundleEventKind
from .._contract._plans import BundlePlan, WorkloadPlan
from .._contract._refs import WorkloadRef
from .._input._convert import unstructure
from ._fake_world import FakeWorld, Instance, Workload

__all__ = [
    "image_digest",
    "largest_fit",
    "place",
    "placements",
    "refuse_while_stopping",
    "start",
    "used_by_node",
    "workload_digest",
]

Used = dict[str, tuple[int, int]]
"""CPU millicores and memory bytes in use, by node name."""


def workload_digest(workload: WorkloadPlan) -> str:
    """What identifies a running instance: a changed digest replaces the instance."""
    # Exposure says who may connect, not what runs: changing it replaces no instance.
    data = json.dumps(unstructure(attrs.evolve(workload, exposed=False)), sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def image_digest(image: str) -> str:
    """The digest the fake reports for an image reference."""
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def used_by_node(world: FakeWorld, exclude_bundle: str | None) -> Used:
    """What the running instances use on each node, but those of ``exclude_bundle``."""
    world.reads += 1
    used = {node.name: (0, 0) for node in world.nodes}
    for bundle_id, bundle in world.bundles.items():
        if bundle_id == exclude_bundle:
            continue
        for workload in bundle.workloads.values():
            instance = workload.instance
            if instance and instance.running and instance.node in used:
                cpu, memory = used[instance.node]
                resources = workload.plan.resources
                used[instance.node] = (
                    cpu + (resources.cpu_millis or 0),
                    memory + (resources.memory_bytes or 0),
                )
    return used


async def placements(world: FakeWorld, exclude_bundle: str | None) -> Used:
    """:func:`used_by_node`, read once per read scope (an expensive read on a real runtime)."""

    async def read() -> Used:
        return used_by_node(world, exclude_bundle)

    return await scoped_read(("fake-placements", exclude_bundle), read)


def largest_fit(world: FakeWorld, used: Used) -> Fit | None:
    """The roomiest free space left on one node."""
    return roomiest(
        Fit(
            cpu_millis=max(n.cpu_millis - used[n.name][0], 0),
            memory_bytes=max(n.memory_bytes - used[n.name][1], 0),
        )
        for n in world.nodes
    )


def refuse_while_stopping(world: FakeWorld, bundle_id: str, starting: set[str]) -> None:
    """Refuse to start a workload whose old instance still stops (a destroyed bundle: any).

    The fake waits no real time for it: its clock moves only when a test moves it.
    """
    stopping = world.stopping(bundle_id)
    if bundle_id not in world.leaving:
        stopping = [name for name in stopping if name in starting]
    if stopping:
        raise StillStopping(
            f"workloads of {bundle_id!r} are still stopping: {', '.join(stopping)}",
            details={"bundle_id": bundle_id, "workloads": stopping},
        )


def place(world: FakeWorld, plan: BundlePlan, starting: list[WorkloadPlan]) -> dict[str, str]:
    """Choose a node for each workload to start, or raise before anything is written."""
    used = used_by_node(world, plan.bundle_id)
    bundle = world.bundles.get(plan.bundle_id)
    if bundle is not None:  # the bundle's instances that keep running keep their room
        starting_names = {w.name for w in starting}
        planned_names = {w.name for w in plan.workloads}
        for name, kept in bundle.workloads.items():
            instance = kept.instance
            if name in starting_names or not (instance and instance.running):
                continue
            if name in planned_names:
                cpu, memory = used[instance.node]
                used[instance.node] = (
                    cpu + (kept.plan.resources.cpu_millis or 0),
                    memory + (kept.plan.resources.memory_bytes or 0),
                )
    sizes = {node.name: node for node in world.nodes}
    chosen: dict[str, str] = {}
    for workload in starting:
        cpu = workload.resources.cpu_millis or 0
        memory = workload.resources.memory_bytes or 0
        for name, (used_cpu, used_memory) in used.items():
            if name in world.lost_nodes:  # nothing is placed where nothing reports
                continue
            node = sizes[name]
            if used_cpu + cpu <= node.cpu_millis and used_memory + memory <= node.memory_bytes:
                chosen[workload.name] = name
                used[name] = (used_cpu + cpu, used_memory + memory)
                break
        else:
            raise CapacityExceeded(
                f"no node has room for workload {workload.name!r} ({cpu}m CPU, {memory} bytes)",
                details={"bundle_id": plan.bundle_id, "workload": workload.name},
            )
    return chosen


def start(world: FakeWorld, ref: WorkloadRef, workload: Workload, digest: str, node: str) -> None:
    """Start a new instance of ``workload`` on ``node``, as its image's behaviour says."""
    behaviour = world.behaviour(workload.plan.image)
    world.instances_started += 1
    if workload.instance is not None:
        world.strand(ref, workload.instance)
    instance = Instance(
        number=world.instances_started, digest=digest, node=node, started_at=world.clock.now()
    )
    if workload.plan.health is not None:
        instance.healthy = behaviour.healthy
    workload.instance = instance
    world.writes += 1
    if behaviour.problem is not None:  # present, stuck before it runs: no STARTED
        instance.running = False
        instance.problem, instance.problem_detail = behaviour.problem, behaviour.problem_detail
        return
    world.start_order.append(ref)
    world.emit(BundleEventKind.STARTED, ref)
    if behaviour.log:
        instance.log.write(world.clock.now(), behaviour.log)
    if behaviour.oom:
        world.end(ref, instance, exit_code=137, oom=True)
    elif behaviour.exit_code is not None:
        world.end(ref, instance, exit_code=behaviour.exit_code, oom=False)
