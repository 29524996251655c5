"""The engine as a fleet member, on a real engine: where an app lives outlasts the process, and
the engine's room counts what its apps hold from the moment apply returns.

On asyncio only: nothing here differs on trio (the cache and the calls are the ones every
other test runs on both).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from _docker_harness import UNPULLABLE
from _docker_tests import adapter_config, workload
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr
from pando_runtime.fleet import BundleRequests

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

MiB = 1024**2


async def restarted(docker_host: str, owner: str) -> AsyncIterator[DockerAdapter]:
    """A fresh adapter of ``owner``: what a restarted process knows, from the engine alone."""
    async with DockerAdapter(adapter_config(docker_host, owner)) as fresh:
        yield fresh


async def test_an_unpulled_app_and_one_destroyed_with_its_volumes_are_held_after_a_restart(
    docker_adapter: DockerAdapter, docker_host: str, owner: str
) -> None:
    unpulled = pr.BundlePlan(bundle_id="unpulled", workloads=(workload("app", image=UNPULLABLE),))
    await docker_adapter.apply(unpulled)
    assert (await docker_adapter.observe(pr.BundleRef("unpulled"))).workload("app").problem is (
        pr.WorkloadProblem.IMAGE_PULL
    )
    kept = pr.BundlePlan(
        bundle_id="kept",
        workloads=(workload("app", mounts=(pr.Mount("kept-data", "/d"),)),),
        volumes=(pr.VolumePlan(volume_id="kept-data", name="data"),),
    )
    await docker_adapter.apply(kept)
    await docker_adapter.destroy(pr.BundleRef("kept"))  # its volume stays
    assert await docker_adapter.holds("kept")
    async for fresh in restarted(docker_host, owner):
        assert fresh.runtime_key() == docker_adapter.runtime_key()
        calls = fresh.stats.calls
        assert await fresh.holds("unpulled")  # its network is its record
        assert await fresh.holds("kept")  # its volume is
        assert not await fresh.holds("never-deployed")
        assert await fresh.held_bundles() == ["kept", "unpulled"]
        assert fresh.stats.calls == calls, "the view answers: no call"
        # observe as the contract has it: the unpulled app exists (its network), its stuck
        # workload is known only to the process that tried; the destroyed one does not exist.
        observed = await fresh.observe(pr.BundleRef("unpulled"))
        assert (observed.exists, observed.workloads) == (True, ())
        gone = await fresh.observe(pr.BundleRef("kept"))
        assert not gone.exists
        assert [v.volume_id for v in gone.volumes] == ["kept-data"]
        await fresh.destroy(pr.BundleRef("kept"), pr.DestroyOptions(keep_volumes=False))
        await fresh.destroy(pr.BundleRef("unpulled"))
        assert await fresh.held_bundles() == []
    other = DockerAdapter(adapter_config(docker_host, f"{owner}x"))
    assert other.runtime_key() != docker_adapter.runtime_key()


async def test_the_room_drops_by_a_new_apps_limits_once_applied_its_own_counted_free(
    docker_adapter: DockerAdapter,
) -> None:
    machine = await docker_adapter.capacity()
    empty = pr.Fit(cpu_millis=machine.total_cpu_millis, memory_bytes=machine.total_memory_bytes)
    assert machine.largest_fit == empty  # this owner holds nothing yet
    limited = pr.Resources(cpu_millis=250, memory_bytes=64 * MiB)
    plan = pr.BundlePlan(
        bundle_id="sized",
        workloads=(
            workload("web", resources=limited),
            workload("worker", resources=limited),
            workload("free"),  # no limits: reserves nothing
        ),
    )
    await docker_adapter.apply(plan)
    held = (500, 128 * MiB)
    assert docker_adapter.requests_by_bundle() == {"sized": BundleRequests(held, (0, 0))}
    room = pr.Fit(cpu_millis=empty.cpu_millis - 500, memory_bytes=empty.memory_bytes - 128 * MiB)
    assert await docker_adapter.largest_fit_for("another") == room
    assert (await docker_adapter.capacity()).largest_fit == room
    assert await docker_adapter.largest_fit_for("sized") == empty
    await docker_adapter.stop(pr.BundleRef("sized"))  # ended containers hold nothing
    assert await docker_adapter.largest_fit_for("another") == empty
    assert docker_adapter.requests_by_bundle() == {}
