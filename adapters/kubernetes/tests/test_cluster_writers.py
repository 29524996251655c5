"""Two host processes applying the same apps at once: one pod per workload, never two.

The adapter's per-namespace lock is in-process only; what keeps two writers from making
two pods of one workload is the pod's name, derived from the plan and the instance it
replaces, so the API server refuses the second create.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.kube]

APPS = 20
MANAGED = "app.kubernetes.io/managed-by=pando"
WRITER = """
import json, sys, time
from pathlib import Path

import anyio
from pando_runtime import BundlePlan, WorkloadPlan
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

config, ids, ready, go, backend, version = json.loads(sys.argv[1])

def plan(bundle_id):
    return BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            WorkloadPlan(name="api", image=f"registry.example/api:{version}", env={"A": bundle_id}),
            WorkloadPlan(name="worker", image="registry.example/worker:1"),
        ),
    )

def settled(adapter):
    for bundle_id in ids:
        ns = namespace_for(bundle_id)
        for workload in ("api", "worker"):
            pods = [p for p in adapter.cache.pods.pods(ns) if p.workload == workload]
            if sum(p.live for p in pods) != 1:
                return False
    return True

async def main():
    async with KubernetesAdapter(config) as adapter:
        Path(ready).touch()
        with anyio.fail_after(60):
            while not Path(go).exists():
                await anyio.sleep(0.01)
        async with anyio.create_task_group() as group:
            for bundle_id in ids:
                group.start_soon(adapter.apply, plan(bundle_id))
        # A host goes on running: the adapter's collector settles what the race left.
        with anyio.move_on_after(20):
            while not settled(adapter):
                await anyio.sleep(0.1)

anyio.run(main, backend=backend)
"""


def _writers(
    tmp_path: Path, config: dict[str, Any], ids: list[str], backends: list[str], version: int = 1
) -> None:
    """Run one writer process per backend, released at the same moment; all must succeed."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    go = tmp_path / f"go-{time.monotonic_ns()}"
    procs = []
    for i, backend in enumerate(backends):
        ready = tmp_path / f"ready-{go.name}-{i}"
        args = json.dumps([config, ids, str(ready), str(go), backend, version])
        procs.append(
            (
                ready,
                subprocess.Popen(
                    [sys.executable, str(script), args],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                ),
            )
        )
    deadline = time.monotonic() + 60
    while not all(ready.exists() for ready, _ in procs):
        assert time.monotonic() < deadline, "writers did not connect"
        assert all(p.poll() is None for _, p in procs), [p.communicate() for _, p in procs]
        time.sleep(0.05)
    go.touch()
    for _, proc in procs:
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, output.decode()


def _live_pods(admin_api: Any, ids: list[str]) -> dict[tuple[str, str], list[Any]]:
    from kubernetes import client  # noqa: PLC0415
    from pando_runtime_kubernetes._names import namespace_for  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    live: dict[tuple[str, str], list[Any]] = {}
    for bundle_id in ids:
        for workload in ("api", "worker"):
            live[bundle_id, workload] = []
        for pod in core.list_namespaced_pod(namespace_for(bundle_id)).items:
            if pod.metadata.deletion_timestamp or pod.status.phase in ("Succeeded", "Failed"):
                continue
            live[bundle_id, pod.metadata.labels["pando.dev/workload"]].append(pod)
    return live


@contextlib.contextmanager
def _pods_made(admin_api: Any, ids: list[str]) -> Iterator[Counter[tuple[str, str]]]:
    """Count the pods created per (namespace, workload) while the block runs (a watch)."""
    from kubernetes import client, watch  # noqa: PLC0415
    from pando_runtime_kubernetes._names import namespace_for  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    namespaces = {namespace_for(i) for i in ids}
    made: Counter[tuple[str, str]] = Counter()
    start = core.list_pod_for_all_namespaces(label_selector=MANAGED, limit=1)
    version = start.metadata.resource_version
    stop = threading.Event()
    watcher = watch.Watch()

    def follow() -> None:
        nonlocal version
        while not stop.is_set():
            for event in watcher.stream(
                core.list_pod_for_all_namespaces,
                label_selector=MANAGED,
                resource_version=version,
                timeout_seconds=2,
            ):
                pod = event["object"]
                version = pod.metadata.resource_version
                if event["type"] == "ADDED" and pod.metadata.namespace in namespaces:
                    made[pod.metadata.namespace, pod.metadata.labels["pando.dev/workload"]] += 1

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        time.sleep(1.0)  # the last events reach the watch
        stop.set()
        thread.join(10)


def _destroy(config: dict[str, Any], ids: list[str]) -> None:
    import anyio  # noqa: PLC0415
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    from pando_runtime import BundleRef  # noqa: PLC0415

    async def main() -> None:
        adapter = KubernetesAdapter(config)
        try:
            for bundle_id in ids:
                await adapter.destroy(BundleRef(bundle_id))
        finally:
            await adapter.aclose()

    anyio.run(main)


def test_two_processes_applying_the_same_apps_make_one_pod_per_workload(
    adapter_config: dict[str, Any], admin_api: Any, tmp_path: Path
) -> None:
    from kubernetes import client  # noqa: PLC0415

    ids = [f"twice-{i:02d}-{time.monotonic_ns() % 10**6}" for i in range(APPS)]
    try:
        with _pods_made(admin_api, ids) as made:
            _writers(tmp_path, adapter_config, ids, ["asyncio", "trio"])
        assert len(made) == 2 * APPS
        assert set(made.values()) == {1}, "the second writer's create was refused, never made"
        live = _live_pods(admin_api, ids)
        counts = {key: len(pods) for key, pods in live.items()}
        assert counts == dict.fromkeys(live, 1), "exactly one live pod per workload"

        # A duplicate left by another writer (an older version named pods at random).
        core = client.CoreV1Api(admin_api)
        planted = []
        for bundle_id in ids[:5]:
            (original,) = live[bundle_id, "api"]
            body = admin_api.sanitize_for_serialization(original)
            meta = body["metadata"]
            body["metadata"] = {
                "name": meta["name"][:-8] + "dupl1cat",
                "namespace": meta["namespace"],
                "labels": meta["labels"],
                "annotations": {**meta["annotations"], "pando.dev/created": "1"},
            }
            body["spec"].pop("nodeName", None)
            body.pop("status", None)
            core.create_namespaced_pod(meta["namespace"], body)
            planted.append((meta["namespace"], body["metadata"]["name"]))
        doubled = _live_pods(admin_api, ids[:5])
        assert [len(doubled[bundle_id, "api"]) for bundle_id in ids[:5]] == [2] * 5
        _writers(tmp_path, adapter_config, ids, ["asyncio"])
        live = _live_pods(admin_api, ids)
        counts = {key: len(pods) for key, pods in live.items()}
        assert counts == dict.fromkeys(live, 1), "the next apply removed the duplicates"
        names = {pod.metadata.name for pods in live.values() for pod in pods}
        assert not names & {name for _, name in planted}, "the older pod is the one removed"

        # Both change the plan at once (each replaces the running pod): one pod, the new one.
        _writers(tmp_path, adapter_config, ids, ["trio", "asyncio"], version=2)
        live = _live_pods(admin_api, ids)
        counts = {key: len(pods) for key, pods in live.items()}
        assert counts == dict.fromkeys(live, 1), "exactly one live pod per workload"
        images = {pods[0].spec.containers[0].image for (_, w), pods in live.items() if w == "api"}
        assert images == {"registry.example/api:2"}
    finally:
        _destroy(adapter_config, ids)
