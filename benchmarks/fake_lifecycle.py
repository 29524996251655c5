"""Benchmark: lifecycles per second on the fake adapter, and the import time of pando_runtime.

A lifecycle is apply + observe + destroy of a three-workload bundle. Prints
figures; asserts nothing about time.

    python benchmarks/fake_lifecycle.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import anyio

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter


def plan(index: int) -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=f"bench-{index}",
        workloads=(
            pr.WorkloadPlan(name="db", image="example/db:1", ports=(pr.Port(5432),)),
            pr.WorkloadPlan(
                name="api",
                image="example/api:1",
                depends_on=("db",),
                env={"DB": "db:5432"},
                ports=(pr.Port(8080),),
            ),
            pr.WorkloadPlan(
                name="web",
                image="example/web:1",
                depends_on=("api",),
                resources=pr.Resources(cpu_millis=100, memory_bytes=64 << 20),
            ),
        ),
    )


async def lifecycles(seconds: float) -> tuple[int, float]:
    fake = FakeAdapter()
    count = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        p = plan(count)
        handle = await fake.apply(p)
        observed = await fake.observe(handle.ref)
        assert observed.all_running
        await fake.destroy(handle.ref)
        count += 1
    return count, elapsed


def import_time(runs: int) -> float:
    def timed(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - start

    base = statistics.median(timed("pass") for _ in range(runs))
    full = statistics.median(timed("import pando_runtime") for _ in range(runs))
    return full - base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--import-runs", type=int, default=15)
    args = parser.parse_args()
    for backend in ("asyncio", "trio"):
        count, elapsed = anyio.run(lifecycles, args.seconds, backend=backend)
        print(
            f"fake lifecycle ({backend}): {count / elapsed:,.0f} apply+observe+destroy/s "
            f"of a 3-workload bundle ({count} in {elapsed:.1f} s)"
        )
    print(
        f"import pando_runtime: {import_time(args.import_runs) * 1000:.1f} ms "
        f"(median of {args.import_runs}, interpreter start subtracted)"
    )


if __name__ == "__main__":
    main()
