"""Stop and destroy on a real node, honest in effect: a pod ending gracefully is stopping.

The app's container traps SIGTERM and keeps serving HTTP for ``SLOW_STOP_SECONDS`` (the pod's
grace period is 30 s). Its pod IP is probed from the node's network namespace, as a neighbour
would reach it. Right after ``destroy`` (or ``stop``) returns, ``observe`` must never call the
workload gone (or stopped) while the container still answers, and an ``apply`` right after a
``destroy`` must never run the new instance beside the old one. The seconds each step took
are printed (``-s``) and recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _real import MARKS, new_id, wait_for
from _real_harness import SLOW_STOP, SLOW_STOP_PORT
from localcluster.realnode.netns import connects_from
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import BundlePlan, BundleRef, ObservedBundle, Port, WorkloadPlan

pytestmark = MARKS

TIMEOUT = 90.0


def _plan(bundle: str) -> BundlePlan:
    slow = WorkloadPlan(
        name="slow", image=_image(), command=("sh", "-c", SLOW_STOP), ports=(Port(SLOW_STOP_PORT),)
    )
    return BundlePlan(bundle_id=bundle, workloads=(slow,))


def _image() -> str:
    from localcluster import images  # noqa: PLC0415

    return images.WORKLOAD


async def _pods(admin_api: Any, bundle: str) -> list[Any]:
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    ns = namespace_for(bundle)
    return list(await anyio.to_thread.run_sync(lambda: core.list_namespaced_pod(ns).items))


async def _answers(node_ns: str, address: str) -> bool:
    """Whether the pod at ``address`` serves its page (1 s: a gone pod's IP answers nothing)."""
    body = await anyio.to_thread.run_sync(connects_from, node_ns, address, SLOW_STOP_PORT, 1.0)
    return bool(body and body.endswith(b"ok-slow\n"))


async def _running_app(
    adapter: KubernetesAdapter, admin_api: Any, node_ns: str, plan: BundlePlan
) -> tuple[str, str]:
    """Apply ``plan``; once it runs and answers: (its instance id, its pod IP)."""
    await adapter.apply(plan)
    observed = await wait_for(adapter, plan.bundle_id, lambda o: o.all_running)
    uid = observed.workload("slow").instance_id
    assert uid
    pod = next(p for p in await _pods(admin_api, plan.bundle_id) if p.metadata.uid == uid)
    address = str(pod.status.pod_ip)
    with anyio.fail_after(TIMEOUT):
        while not await _answers(node_ns, address):  # noqa: ASYNC110 - polls the real server
            await anyio.sleep(0.2)  # httpd starts after the container does
    return uid, address


def _gone(observed: ObservedBundle, uid: str, done: str) -> bool:
    if done == "gone":
        return not observed.exists
    return not any(w.instance_id == uid and w.running for w in observed.workloads)


async def _watch(
    adapter: KubernetesAdapter, bundle: str, uid: str, *, probe: tuple[str, str], done: str
) -> dict[str, float]:
    """From the call's return, observe then probe until ``done``; when each stopped, in s.

    Observation first: once it says ``done``, the probe after it must find nothing answering;
    until then a running old instance must be reported stopping. ``probe``: (the node's
    network namespace, the pod's IP).
    """
    node_ns, address = probe
    start = time.monotonic()
    stopped_serving: float | None = None
    with anyio.fail_after(TIMEOUT):
        while True:
            observed = await adapter.observe(BundleRef(bundle))
            at = time.monotonic() - start
            answers = await _answers(node_ns, address)
            if not answers and stopped_serving is None:
                stopped_serving = at  # it answered nothing asked just after this time
            if _gone(observed, uid, done):
                assert not answers, f"observe said {done} at {at:.1f} s while it still served"
                break
            old = [w for w in observed.workloads if w.instance_id == uid and w.running]
            assert all(w.stopping for w in old), f"running, told to end, not stopping: {observed}"
            await anyio.sleep(0.1)
    assert stopped_serving is not None
    return {"serving_after": stopped_serving, "observed_after": at}


@pytest.mark.parametrize(("call", "done"), [("destroy", "gone"), ("stop", "stopped")])
async def test_observe_never_calls_it_ended_while_the_container_still_serves(
    real_adapter: KubernetesAdapter,
    real_node_cluster: Any,
    real_admin_api: Any,
    call: str,
    done: str,
) -> None:
    node_ns = real_node_cluster.local.real_node.network.node
    plan = _plan(new_id("stopping"))
    ref = BundleRef(plan.bundle_id)
    try:
        uid, address = await _running_app(real_adapter, real_admin_api, node_ns, plan)
        began = time.monotonic()
        await (real_adapter.destroy(ref) if call == "destroy" else real_adapter.stop(ref))
        returned = time.monotonic() - began
        first = await real_adapter.observe(ref)
        seconds = await _watch(
            real_adapter, plan.bundle_id, uid, probe=(node_ns, address), done=done
        )
        print(  # noqa: T201 - the figures of docs/performance.md
            f"\n{call} returned in {returned:.2f} s; after it the container served "
            f"{seconds['serving_after']:.2f} s more, observe said {done} after "
            f"{seconds['observed_after']:.2f} s (first answer: exists={first.exists}, "
            f"stopping={first.stopping})"
        )
    finally:
        await real_adapter.destroy(ref)


async def test_apply_right_after_destroy_never_serves_beside_the_old_instance(
    real_adapter: KubernetesAdapter, real_node_cluster: Any, real_admin_api: Any
) -> None:
    node_ns = real_node_cluster.local.real_node.network.node
    plan = _plan(new_id("stopping"))
    both: list[float] = []
    old_served: list[float] = []
    try:
        uid, address = await _running_app(real_adapter, real_admin_api, node_ns, plan)
        began = time.monotonic()
        applied: list[float] = []

        async def probe_both() -> None:
            """Probe the old pod and any new one, until the apply has returned."""
            while not applied:
                old = await _answers(node_ns, address)
                new = [
                    str(p.status.pod_ip)
                    for p in await _pods(real_admin_api, plan.bundle_id)
                    if p.metadata.uid != uid and p.status.pod_ip
                ]
                if old:
                    old_served.append(time.monotonic() - began)
                if old and new and any([await _answers(node_ns, a) for a in new]):
                    both.append(time.monotonic() - began)
                await anyio.sleep(0.1)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(probe_both)
            await real_adapter.destroy(BundleRef(plan.bundle_id))
            destroyed = time.monotonic() - began
            await real_adapter.apply(plan)
            applied.append(time.monotonic() - began)
        assert not both, f"old and new instances answered together at {both} s"
        assert not await _answers(node_ns, address), "the old instance outlived the apply"
        observed = await wait_for(real_adapter, plan.bundle_id, lambda o: o.all_running)
        assert observed.workload("slow").instance_id != uid
        assert not observed.stopping
        print(  # noqa: T201 - the figures of docs/performance.md
            f"\ndestroy returned in {destroyed:.2f} s, the old instance last answered at "
            f"{max(old_served, default=0.0):.2f} s, the apply right after returned at "
            f"{applied[0]:.2f} s (it waited {applied[0] - destroyed:.2f} s)"
        )
    finally:
        await real_adapter.destroy(BundleRef(plan.bundle_id))
