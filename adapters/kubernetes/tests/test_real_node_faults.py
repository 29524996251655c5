"""Faults under running apps on the real node: kubelet killed, containerd stopped, the API
server killed, each started again.

An app (a health-checked web server and an idle workload, two pods) runs on the real node and
is watched four ways (see :mod:`_node_faults`): containerd's own list of its containers and
tasks, read on the node; the web container answering HTTP from the node's namespace; the
adapter's ``observe``; the adapter's ``watch_bundles``. Through the fault and after it (once
a new app has run on the node and its start reached the adapter) each must be unchanged: the
same containers with the same processes, every request answered, the same ``instance_id``,
start time and health, no event about the app. Then the control: the web container is killed
for real, and each check sees it (the task stops, requests go unanswered, ``observe`` says it
ended with 137, the stream says ``EXITED``).

What each shows is in docs/reliability.md ("Node faults").
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _node_faults import watched_app
from _real import MARKS
from localcluster.realnode import faults
from localcluster.realnode.stack import RealNode
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import AdapterUnavailable, BundleRef

pytestmark = MARKS


@pytest.fixture
def node(real_node_cluster: Any) -> Iterator[RealNode]:
    """The real node of the session's cluster, whole again after the test whatever happened:
    every program a fault left down started again (the API server first), and answering."""
    cluster = real_node_cluster.local
    real_node: RealNode = cluster.real_node
    try:
        yield real_node
    finally:
        apiserver = cluster.component("kube-apiserver")
        if not apiserver.running():
            apiserver.start()
            cluster.wait_healthy("kube-apiserver", timeout=120)
        faults.heal(real_node)


@pytest.mark.parametrize(
    ("component", "sig"),
    [
        pytest.param("kubelet", signal.SIGKILL, id="kubelet-killed"),
        # As a service manager stops it, and as it crashes.
        pytest.param("containerd", signal.SIGTERM, id="containerd-stopped"),
        pytest.param("containerd", signal.SIGKILL, id="containerd-killed"),
    ],
)
async def test_a_node_program_down_and_back_leaves_the_apps_alone(
    real_adapter: KubernetesAdapter,
    real_admin_api: Any,
    node: RealNode,
    component: str,
    sig: signal.Signals,
) -> None:
    async with watched_app(real_adapter, real_admin_api, node) as app:
        await anyio.to_thread.run_sync(faults.take_down, node, component, sig)
        if component == "containerd":
            assert not await anyio.to_thread.run_sync(faults.runtime_answers, node)
        await app.runs_on(runtime_up=component != "containerd")
        faults.start_again(node, component)  # from this thread: it dies with the test process
        await anyio.to_thread.run_sync(faults.wait_healthy, node, component)

        await app.settled()
        await app.assert_untouched()
        assert (app.events.gaps, app.events.lost) == (0, [])
        await app.control()


async def test_the_api_server_killed_and_back_leaves_the_apps_alone_and_events_resume(
    real_adapter: KubernetesAdapter, real_admin_api: Any, real_node_cluster: Any, node: RealNode
) -> None:
    cluster = real_node_cluster.local
    apiserver = cluster.component("kube-apiserver")
    async with watched_app(real_adapter, real_admin_api, node) as app:
        await anyio.to_thread.run_sync(apiserver.kill)
        await app.runs_on()
        # The adapter answers from what it last confirmed, or says it cannot: never a guess.
        try:
            during = await real_adapter.observe(BundleRef(app.bundle_id))
        except AdapterUnavailable:
            pass
        else:
            assert during.workloads == app.observed.workloads
        apiserver.start()
        await anyio.to_thread.run_sync(lambda: cluster.wait_healthy("kube-apiserver", timeout=120))

        # A change made after the restart reaches the stream; then the app is as it was (a
        # MISSED or a stream opened again, if any, is the contract's "re-observe": done here).
        await app.settled()
        await app.assert_untouched()
        await app.control()
