"""Benchmark: the Docker adapter on each Docker Engine the harness runs, side by side.

    python benchmarks/docker_engines.py [--rounds 10] [--engines 20.10,28.5]

Starts one engine of each release (tests/support/localdocker: Debian's 20.10 and the 28.5
``tools/docker/build.sh`` builds; needs root and ``docker.io``), one adapter on each, and takes
turns between them each round, so the machine's other work weighs on both alike. Per round
and engine:

- apply to running: from ``apply`` of a one-container app (busybox) until ``observe`` says it
  runs (observed every 10 ms);
- observe: ten observes of the running app;
- exec: three ``run`` of ``true`` in it;
- then the app is destroyed (not timed).

Prints p50 / p90 / max seconds of each, and the Engine API calls of each operation (the
adapter's transport counter, by route). Says what is missing and exits 0 where the machine
cannot run the engines. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

import pando_runtime as pr

if TYPE_CHECKING:
    from pando_runtime_docker import DockerAdapter

ROOT = Path(__file__).resolve().parents[1]
OBSERVES = 10
EXECS = 3


class Figures:
    """Seconds and Engine API calls per operation, of one engine."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}
        self.calls: dict[str, Counter[str]] = {}
        self.count: Counter[str] = Counter()

    async def timed(
        self, name: str, adapter: DockerAdapter, operation: Callable[[], Awaitable[Any]]
    ) -> None:
        before = Counter(adapter.stats.calls_by_kind)
        started = time.perf_counter()
        await operation()
        self.seconds.setdefault(name, []).append(time.perf_counter() - started)
        self.calls.setdefault(name, Counter()).update(Counter(adapter.stats.calls_by_kind) - before)
        self.count[name] += 1


async def until_running(adapter: DockerAdapter, bundle_id: str) -> None:
    with anyio.fail_after(60):
        while True:
            observed = await adapter.observe(pr.BundleRef(bundle_id))
            if observed.all_running and observed.workloads:
                return
            await anyio.sleep(0.01)


async def one_round(adapter: DockerAdapter, image: str, figures: Figures, index: int) -> None:
    bundle_id = f"bench-{index}"
    plan = pr.BundlePlan(
        bundle_id=bundle_id,
        workloads=(pr.WorkloadPlan(name="main", image=image, command=("sleep", "600")),),
    )
    ref = pr.WorkloadRef(bundle_id, "main")

    async def apply_to_running() -> None:
        await adapter.apply(plan)
        await until_running(adapter, bundle_id)

    async def run_true() -> None:
        result = await adapter.run(ref, pr.ExecRequest(command=("true",)))
        if result.exit_code != 0:
            raise RuntimeError(f"true exited {result.exit_code}")

    await figures.timed("apply to running", adapter, apply_to_running)
    for _ in range(OBSERVES):
        await figures.timed("observe", adapter, lambda: adapter.observe(pr.BundleRef(bundle_id)))
    for _ in range(EXECS):
        await figures.timed("exec (run true)", adapter, run_true)
    await adapter.destroy(pr.BundleRef(bundle_id))


def quantiles(values: list[float]) -> str:
    ordered = [v * 1000 for v in sorted(values)]
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(ordered):7.2f} {p90:7.2f} {ordered[-1]:7.2f}"


def report(results: dict[str, Figures], engines: dict[str, Any]) -> None:
    versions = list(results)
    for version in versions:
        print(f"engine {version}: API {engines[version].api.ping()}")
    print(f"\n{'ms: p50 p90 max':<22}" + "".join(f"{v:>25}" for v in versions))
    for name in results[versions[0]].seconds:
        row = "".join(f"{quantiles(results[v].seconds[name]):>25}" for v in versions)
        print(f"{name:<22}{row}")
    print("\nEngine API calls per operation:")
    for name in results[versions[0]].seconds:
        for version in versions:
            figures = results[version]
            per = {k: n / figures.count[name] for k, n in sorted(figures.calls[name].items())}
            total = sum(per.values())
            kinds = ", ".join(f"{k} {n:g}" for k, n in per.items())
            print(f"  {name} on {version}: {total:g} ({kinds})")


async def measure(engines: dict[str, Any], rounds: int) -> dict[str, Figures]:
    from pando_runtime_docker import DockerAdapter  # noqa: PLC0415 - after sys.path is set

    results = {version: Figures() for version in engines}
    owner = f"b{uuid.uuid4().hex[:8]}"
    async with contextlib.AsyncExitStack() as stack:
        adapters = {
            version: await stack.enter_async_context(
                DockerAdapter(
                    {
                        "host": engine.base_url,
                        "owner": owner,
                        "stop_timeout": 1,
                        "helper_image": engine.busybox,
                    }
                )
            )
            for version, engine in engines.items()
        }
        for version, adapter in adapters.items():  # warm up: API version, caches
            await one_round(adapter, engines[version].busybox, Figures(), -1)
        for index in range(rounds):
            for version, adapter in adapters.items():
                await one_round(adapter, engines[version].busybox, results[version], index)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--engines", default="", help="releases, e.g. 20.10,28.5 (default: all)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localdocker import DockerEngine, engines, missing  # noqa: PLC0415 - harness path

    absent = missing()
    if absent:
        print("docker engines benchmark skipped: this machine lacks " + ", ".join(absent))
        return 0
    wanted = [v for v in args.engines.split(",") if v] or list(engines.versions())
    opened: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pando-engines-bench-") as work:
        try:
            for version in wanted:
                engine = DockerEngine(Path(work) / version, binaries=engines.binaries(version))
                opened[version] = engine.open()
            print(f"{time.strftime('%Y-%m-%d')}, {args.rounds} rounds, engines side by side")
            results = anyio.run(measure, opened, args.rounds)
            report(results, opened)
        finally:
            for engine in opened.values():
                engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
