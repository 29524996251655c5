"""Stop and destroy on a real engine, honest in effect, with a container that ends gracefully.

The workload traps SIGTERM and keeps serving for ``SLOW_STOP_SECONDS``. The engine's own
word (``docker inspect``) says whether its container still runs. ``stop`` returns once the
container has ended (the engine's stop waits up to ``stop_timeout``, then kills), and while
it runs ``observe`` reports it stopping; ``destroy`` kills and removes, and returns once the
container is gone, so an apply right after it never runs beside the old one. The seconds are
printed (``-s``) and recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import time

import anyio
import pytest
from _docker_harness import SLOW_STOP_SECONDS, DockerHarness
from _docker_tests import adapter_config, running, until
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def _slow_app(
    adapter: DockerAdapter, harness: DockerHarness, bundle: str
) -> tuple[pr.BundlePlan, str]:
    ref = pr.WorkloadRef(bundle, "slow")
    plan = pr.BundlePlan(
        bundle_id=bundle, workloads=(await harness.slow_stop_workload(adapter, "slow"),)
    )
    await adapter.apply(plan)
    observed = await until(adapter, bundle, running, "the slow workload to run")
    instance_id = observed.workload("slow").instance_id
    assert instance_id
    assert await harness.instance_runs(adapter, ref, instance_id)
    return plan, instance_id


@pytest.mark.parametrize("stop_timeout", [1, SLOW_STOP_SECONDS + 5])
async def test_stop_waits_for_the_container_and_observe_says_stopping_meanwhile(
    docker_host: str, owner: str, harness: DockerHarness, stop_timeout: int
) -> None:
    config = adapter_config(docker_host, owner, stop_timeout=stop_timeout)
    try:
        async with DockerAdapter(config) as adapter:
            plan, instance_id = await _slow_app(adapter, harness, "slowstop")
            ref = pr.WorkloadRef(plan.bundle_id, "slow")
            seen: list[pr.ObservedWorkload] = []
            returned: list[float] = []
            began = time.monotonic()

            async def stop() -> None:
                await adapter.stop(pr.BundleRef(plan.bundle_id))
                returned.append(time.monotonic() - began)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(stop)
                while not returned:
                    observed = (await adapter.observe(pr.BundleRef(plan.bundle_id))).workload(
                        "slow"
                    )
                    runs = await harness.instance_runs(adapter, ref, instance_id)
                    if not observed.running:  # observed first: the engine must agree after
                        assert not runs, f"observed stopped while it ran: {observed}"
                    seen.append(observed)
                    await anyio.sleep(0.05)
            assert not await harness.instance_runs(adapter, ref, instance_id)
            after = (await adapter.observe(pr.BundleRef(plan.bundle_id))).workload("slow")
            assert (after.running, after.stopping) == (False, False)
            told = next((i for i, w in enumerate(seen) if w.stopping), None)
            assert told is not None, "the stop was never observed in progress"
            assert all(w.stopping for w in seen[told:] if w.running), seen
            print(  # noqa: T201 - the figures of docs/performance.md
                f"\nstop_timeout {stop_timeout} s, app ends {SLOW_STOP_SECONDS} s after "
                f"SIGTERM: stop returned after {returned[0]:.2f} s, the container ended"
            )
    finally:
        await harness.remove_owned(owner)


async def test_destroy_returns_once_the_container_is_gone_and_a_reapply_starts_alone(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    plan, instance_id = await _slow_app(docker_adapter, harness, "slowgone")
    ref = pr.WorkloadRef(plan.bundle_id, "slow")
    began = time.monotonic()
    await docker_adapter.destroy(pr.BundleRef(plan.bundle_id))
    destroyed = time.monotonic() - began
    assert not await harness.instance_runs(docker_adapter, ref, instance_id)
    assert not (await docker_adapter.observe(pr.BundleRef(plan.bundle_id))).exists
    await docker_adapter.apply(plan)
    applied = time.monotonic() - began
    observed = await until(docker_adapter, plan.bundle_id, running, "the new instance to run")
    new_id = observed.workload("slow").instance_id
    assert new_id
    assert new_id != instance_id
    assert await harness.instance_runs(docker_adapter, ref, new_id)
    assert not await harness.instance_runs(docker_adapter, ref, instance_id)
    print(  # noqa: T201 - the figures of docs/performance.md
        f"\ndestroy returned after {destroyed:.2f} s with the container gone (killed, no "
        f"grace); the apply right after returned at {applied:.2f} s"
    )
