"""Two host processes applying the same apps at once: one pod per workload, never two.

The adapter's per-namespace lock is in-process only; what keeps two writers from making
two pods of one workload is the pod's name, derived from the plan and the instance it
replaces, so the API server refuses the second create.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.kube]

APPS = 20
WRITER = """
import json, sys, time
from pathlib import Path

import anyio
from pando_runtime import BundlePlan, WorkloadPlan
from pando_runtime_kubernetes import KubernetesAdapter

config, ids, ready, go, backend = json.loads(sys.argv[1])

def plan(bundle_id):
    return BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            WorkloadPlan(name="api", image="registry.example/api:1", env={"A": bundle_id}),
            WorkloadPlan(name="worker", image="registry.example/worker:1"),
        ),
    )

async def main():
    async with KubernetesAdapter(config) as adapter:
        Path(ready).touch()
        with anyio.fail_after(60):
            while not Path(go).exists():
                await anyio.sleep(0.01)
        async with anyio.create_task_group() as group:
            for bundle_id in ids:
                group.start_soon(adapter.apply, plan(bundle_id))

anyio.run(main, backend=backend)
"""


def _writers(tmp_path: Path, config: dict[str, Any], ids: list[str], backends: list[str]) -> None:
    """Run one writer process per backend, released at the same moment; all must succeed."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    go = tmp_path / f"go-{time.monotonic_ns()}"
    procs = []
    for i, backend in enumerate(backends):
        ready = tmp_path / f"ready-{go.name}-{i}"
        args = json.dumps([config, ids, str(ready), str(go), backend])
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
        _writers(tmp_path, adapter_config, ids, ["asyncio", "trio"])
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
    finally:
        _destroy(adapter_config, ids)
