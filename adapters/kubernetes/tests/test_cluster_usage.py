"""Usage from the metrics API, on the local control plane: kwok's nodes report what each pod
uses (its ``kwok.x-k8s.io/usage-*`` annotations, else 1m and 1Mi), metrics-server scrapes
them and serves ``metrics.k8s.io`` through the API server's aggregation layer.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _admin_calls import core_call
from localcluster import USAGE_CPU_ANNOTATION, USAGE_MEMORY_ANNOTATION
from localcluster.backends import KubeCluster
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import (
    AdapterUnavailable,
    BundlePlan,
    BundleRef,
    BundleUsage,
    CapabilityUnsupported,
    NotFound,
    Resources,
    VolumePlan,
    WorkloadPlan,
)

pytestmark = [pytest.mark.kube, pytest.mark.anyio, pytest.mark.every_minor]
IMAGE = "registry.example/usage/app:1"
METRICS_SERVICE = "v1beta1.metrics.k8s.io"
MI = 1024**2
SCRAPE_WAIT = 120.0
"""metrics-server needs two or three scrapes (10 s apart) before a new pod has a sample."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def local(kube_cluster: KubeCluster) -> KubeCluster:
    if kube_cluster.backend != "local":
        pytest.skip("kwok's simulated usage and the metrics-server set-up are the local backend's")
    return kube_cluster


@pytest.fixture
async def adapter(adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
    async with KubernetesAdapter(adapter_config) as adapter:
        yield adapter


async def _measured(adapter: KubernetesAdapter, bundle_id: str, *names: str) -> BundleUsage:
    """The bundle's usage once every named workload runs and has a sample."""
    with anyio.fail_after(SCRAPE_WAIT):
        while True:
            usage = await adapter.usage(BundleRef(bundle_id))
            measured = {w.workload for w in usage.workloads if w.running and w.memory_bytes >= 0}
            if measured >= set(names):
                return usage
            await anyio.sleep(1)


async def test_usage_reports_what_each_workload_uses_with_its_limits(
    local: KubeCluster, adapter: KubernetesAdapter, admin_api: Any
) -> None:
    bundle_id = f"use-{uuid.uuid4().hex[:8]}"
    ns = namespace_for(bundle_id)
    plan = BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            WorkloadPlan(
                name="web",
                image=IMAGE,
                resources=Resources(cpu_millis=500, memory_bytes=256 * MI),
            ),
            WorkloadPlan(
                name="worker",
                image=IMAGE,
                resources=Resources(cpu_millis=100, memory_bytes=64 * MI),
            ),
        ),
        volumes=(VolumePlan(volume_id="usage-data", name="data", size_bytes=MI),),
    )
    assert (await adapter.capabilities()).reports_usage
    await adapter.apply(plan)
    try:
        pods = {p.workload: p.name for p in await adapter.session.reads.pods(ns)}
        body = {
            "metadata": {
                "annotations": {USAGE_CPU_ANNOTATION: "120m", USAGE_MEMORY_ANNOTATION: "200Mi"}
            }
        }
        await core_call(admin_api, "patch_namespaced_pod", pods["web"], ns, body)
        usage = await _measured(adapter, bundle_id, "web", "worker")
        by_name = {w.workload: w for w in usage.workloads}
        assert list(by_name) == ["web", "worker"], "plan order"
        web, worker = by_name["web"], by_name["worker"]
        assert web.running
        assert web.memory_bytes == 200 * MI
        # CPU is a rate over two samples of a cumulative counter; kwok integrates exactly.
        assert 110 <= web.cpu_millis <= 130, web
        assert (web.cpu_limit_millis, web.memory_limit_bytes) == (500, 256 * MI)
        assert worker.memory_bytes == MI, "kwok's default usage for a pod"
        assert worker.cpu_limit_millis == 100
        assert [v.volume_id for v in usage.volumes] == ["usage-data"]
        assert usage.volumes[0].bytes == -1, "the metrics API does not measure volumes"

        calls = adapter.api_calls
        await adapter.usage(BundleRef(bundle_id))
        assert adapter.api_calls - calls == 1, "one read of the namespace's pod metrics"

        total = await adapter.in_use()
        assert total.memory_bytes >= 201 * MI
        assert total.cpu_millis >= web.cpu_millis + worker.cpu_millis - 2

        await core_call(
            admin_api,
            "patch_namespaced_pod",
            pods["worker"],
            ns,
            {"metadata": {"annotations": {"test.pando.dev/exit-code": "0"}}},
        )
        with anyio.fail_after(30):
            while True:
                usage = await adapter.usage(BundleRef(bundle_id))
                worker = next(w for w in usage.workloads if w.workload == "worker")
                if not worker.running:
                    break
                await anyio.sleep(0.2)
        assert (worker.cpu_millis, worker.memory_bytes) == (0, 0), "an ended workload uses nothing"
    finally:
        await adapter.destroy(BundleRef(bundle_id))
    with pytest.raises(NotFound):
        await adapter.usage(BundleRef(f"absent-{uuid.uuid4().hex[:8]}"))


@pytest.fixture
def metrics_service(local: KubeCluster, admin_api: Any) -> Iterator[dict[str, Any]]:
    """The metrics APIService, registered again as it was (and Available) after the test."""
    from kubernetes import client  # noqa: PLC0415

    api = client.ApiregistrationV1Api(admin_api)
    original = admin_api.sanitize_for_serialization(api.read_api_service(METRICS_SERVICE))
    yield original
    with contextlib.suppress(client.exceptions.ApiException):
        api.delete_api_service(METRICS_SERVICE)
    api.create_api_service({**original, "metadata": {"name": METRICS_SERVICE}, "status": None})
    assert local.local is not None
    deadline = time.monotonic() + 30
    while not local.local.metrics_api_available():
        assert time.monotonic() < deadline, "the metrics API is not available again"
        time.sleep(0.2)


async def test_reports_usage_follows_the_metrics_api(
    metrics_service: dict[str, Any], adapter_config: dict[str, Any], admin_api: Any
) -> None:
    from kubernetes import client  # noqa: PLC0415

    api = client.ApiregistrationV1Api(admin_api)
    # A provider that does not answer (port with nothing behind it): the API is there but down.
    dead = {"spec": {"service": {**metrics_service["spec"]["service"], "port": 1}}}
    await anyio.to_thread.run_sync(lambda: api.patch_api_service(METRICS_SERVICE, dead))
    async with KubernetesAdapter(adapter_config) as adapter:
        with anyio.fail_after(30):
            while True:  # the aggregator notices the dead backend within seconds
                try:
                    await adapter.in_use()
                except AdapterUnavailable as error:
                    refusal = error
                    break
                await anyio.sleep(0.5)
        assert refusal.code == "ADAPTER_UNAVAILABLE"
        assert "pod metrics" in refusal.message
        assert (await adapter.capabilities()).reports_usage, "registered, only unavailable"

        await anyio.to_thread.run_sync(lambda: api.delete_api_service(METRICS_SERVICE))
        assert (await adapter.capabilities()).reports_usage, "remembered until a health check"
        await adapter.health_check()
        capabilities = await adapter.capabilities()
        assert not capabilities.reports_usage, "the health check asked again"
        with pytest.raises(CapabilityUnsupported) as refused:
            await adapter.usage(BundleRef("any"))
        assert refused.value.code == "CAPABILITY_UNSUPPORTED"
        assert "metrics.k8s.io" in refused.value.message
