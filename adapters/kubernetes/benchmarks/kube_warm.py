"""Benchmark: a cold start against a warm one (``cache_dir``), with apps changed while down.

    python adapters/kubernetes/benchmarks/kube_warm.py [--apps 200] [--churn 20] [--down 5]

It starts the local control plane (tests/support/localcluster) with kwok nodes for every pod,
applies N one-workload apps, and runs a fresh adapter process with ``cache_dir`` once so the
store holds them. Then, for each restart, while no adapter runs it re-applies ``--churn`` apps
with a new image (their pods are replaced) and waits ``--down`` seconds; then a fresh adapter
process starts, cold (no ``cache_dir``) or warm (the store), and the figures are the seconds
from its start to its first answered observe, its API calls (the lists among them) and the
bytes it received, and for the warm one how its cache started and the events it replayed.
Prints figures; asserts only that the run did what it says (the warm start listed nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[3]
PODS_PER_NODE = 110
LISTS = ("GET pods", "GET services", "GET persistentvolumeclaims")


def bundle_id(i: int) -> str:
    return f"warm-{i:05d}"


def plan(i: int, image: str = "registry.example/bench/app:1") -> Any:
    import pando_runtime as pr  # noqa: PLC0415 - children that never plan stay light

    web = pr.WorkloadPlan(
        name="web",
        image=image,
        resources=pr.Resources(cpu_millis=10, memory_bytes=16 * 1024**2),
    )
    return pr.BundlePlan(bundle_id=bundle_id(i), workloads=(web,))


def config(kubeconfig: str, cache_dir: str | None) -> dict[str, Any]:
    return {
        "kubeconfig": kubeconfig,
        "trust_network_policy": True,
        "api_qps": 1000.0,
        "api_burst": 200,
        "schedule_wait": 120.0,
        "read_timeout": 120.0,
        "cache_dir": cache_dir,
    }


async def each(count: int, concurrency: int, fn: Any) -> None:
    limiter = anyio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            await fn(i)

    async with anyio.create_task_group() as group:
        for i in range(count):
            group.start_soon(one, i)


def child_start(kubeconfig: str, cache_dir: str | None, apps: int) -> dict[str, Any]:
    """A fresh adapter process: to its first answered observe, what it cost, how it started."""
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    from pando_runtime import BundleRef  # noqa: PLC0415

    async def run() -> dict[str, Any]:
        start = time.perf_counter()
        async with KubernetesAdapter(config(kubeconfig, cache_dir)) as adapter:
            observed = await adapter.observe(BundleRef(bundle_id(apps - 1)))
            seconds = time.perf_counter() - start
            assert observed.exists, "the last app exists"
            report = adapter.session.start_report()
            calls = adapter.session.calls_by_kind
            return {
                "seconds": seconds,
                "calls": adapter.api_calls,
                "lists": sum(calls.get(kind, 0) for kind in LISTS),
                "bytes": (await adapter.session.transport()).bytes_received,
                "start": report["start"],
                "replayed": report["replayed"],
            }

    return anyio.run(run)


def run_child(kubeconfig: str, cache_dir: str | None, apps: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", kubeconfig, str(apps), cache_dir or "-"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"the adapter process failed:\n{result.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


async def setup(kubeconfig: str, apps: int, concurrency: int) -> None:
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    from pando_runtime import BundleRef  # noqa: PLC0415

    async with KubernetesAdapter(config(kubeconfig, None)) as adapter:
        start = time.perf_counter()
        await each(apps, concurrency, lambda i: adapter.apply(plan(i)))
        print(f"applied:      {apps} apps in {time.perf_counter() - start:.1f} s")
        with anyio.fail_after(600):
            while not (await adapter.observe(BundleRef(bundle_id(apps - 1)))).all_running:  # noqa: ASYNC110 - polls the cluster
                await anyio.sleep(0.5)


async def churn(kubeconfig: str, count: int, round_: int, concurrency: int) -> None:
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    image = f"registry.example/bench/app:{round_ + 2}"
    async with KubernetesAdapter(config(kubeconfig, None)) as adapter:
        await each(count, concurrency, lambda i: adapter.apply(plan(i, image)))


def print_start(label: str, r: dict[str, Any]) -> None:
    print(
        f"{label:13s} {r['seconds']:.2f} s to the first observe, {r['calls']} calls "
        f"({r['lists']} lists), {r['bytes'] / 1024:.0f} KiB received, start {r['start']}, "
        f"replayed {r['replayed']}"
    )


def local_cluster(stack: contextlib.ExitStack, apps: int) -> str:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster import LocalCluster, NodeSpec  # noqa: PLC0415

    count = max(2, math.ceil(apps * 1.2 / PODS_PER_NODE))
    nodes = [
        NodeSpec(f"kwok-node-{i}", cpu="64", memory="256Gi", pods=PODS_PER_NODE)
        for i in range(count)
    ]
    return str(stack.enter_context(LocalCluster(nodes=nodes)).kubeconfig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=200)
    parser.add_argument("--churn", type=int, default=20, help="apps re-applied while down")
    parser.add_argument("--down", type=float, default=5.0, help="seconds down after the churn")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kubeconfig, apps, cache_dir = args.child
        print(
            json.dumps(child_start(kubeconfig, None if cache_dir == "-" else cache_dir, int(apps)))
        )
        return
    with contextlib.ExitStack() as stack:
        kubeconfig = local_cluster(stack, args.apps)
        cache_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="kube-warm-"))
        anyio.run(setup, kubeconfig, args.apps, args.concurrency)
        first = run_child(kubeconfig, cache_dir, args.apps)  # fills the store
        print_start("first (cold):", first)
        results: dict[str, dict[str, Any]] = {}
        for round_, label in enumerate(("cold", "warm")):
            anyio.run(churn, kubeconfig, args.churn, round_, args.concurrency)
            time.sleep(args.down)
            results[label] = run_child(
                kubeconfig, cache_dir if label == "warm" else None, args.apps
            )
            print_start(f"{label}:", results[label])
        warm = results["warm"]
        assert warm["lists"] == 0, "a warm start after a short restart lists nothing"
        assert warm["start"] == "warm", warm
        print(f"speed-up:     {results['cold']['seconds'] / warm['seconds']:.1f}x")
        print(f"apps: {args.apps}, re-applied while down: {args.churn}, down {args.down:.0f} s")


if __name__ == "__main__":
    main()
