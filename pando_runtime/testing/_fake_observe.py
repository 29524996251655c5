"""What the fake's ``observe`` reports of a bundle in its world."""

from __future__ import annotations

from datetime import datetime

from .._contract._observed import ObservedBundle, ObservedWorkload
from ._fake_scheduler import image_digest
from ._fake_world import FakeWorld

__all__ = ["observed_bundle"]


def observed_bundle(world: FakeWorld, bundle_id: str, confirmed_at: datetime) -> ObservedBundle:
    """The bundle as observed: its workloads' newest instances and its volumes.

    A destroyed bundle whose instances still stop (their grace period) exists with those alone
    until none runs; an instance on a lost node is reported ``lost``.
    """
    world.settle_stops()
    bundle = world.bundles.get(bundle_id) or world.leaving.get(bundle_id)
    if bundle is None:
        return ObservedBundle(
            bundle_id=bundle_id,
            exists=False,
            volumes=world.observed_volumes(bundle_id, None),
            confirmed_at=confirmed_at,
        )
    leaving = bundle_id not in world.bundles
    workloads = []
    for workload_plan in bundle.plan.workloads:
        instance = bundle.workloads[workload_plan.name].instance
        if instance is None and leaving:
            continue  # destroyed: only its instances still stopping are reported
        if instance is None:
            workloads.append(
                ObservedWorkload(name=workload_plan.name, present=False, running=False)
            )
            continue
        digest = image_digest(workload_plan.image)
        workloads.append(instance.observed(workload_plan.name, digest, lost=world.lost(instance)))
    return ObservedBundle(
        bundle_id=bundle_id,
        exists=True,
        workloads=workloads,
        volumes=world.observed_volumes(bundle_id, bundle.plan),
        confirmed_at=confirmed_at,
    )
