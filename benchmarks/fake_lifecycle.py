"""Benchmark: lifecycles per second on the fake adapter, and import times (pando_runtime vs attrs).

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


IMPORTS = {
    "import attrs": "import attrs",
    "import pando_runtime": "import pando_runtime",
    "import pando_runtime + the contract types": (
        "import pando_runtime as pr; pr.RuntimeAdapter, pr.BundlePlan, pr.ObservedBundle"
    ),
    "import pando_runtime + a conversion (cattrs)": (
        "import pando_runtime as pr; pr.structure({'number': 80}, pr.Port)"
    ),
    "pando-runtime --help": (
        "import contextlib, io; from pando_runtime._cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])"
    ),
}


def import_times(runs: int) -> dict[str, float]:
    """Median seconds of each snippet in a fresh interpreter, interpreter start subtracted.

    The snippets take turns, run after run, so that load from other processes falls on all alike.
    """
    samples: dict[str, list[float]] = {name: [] for name in ("pass", *IMPORTS)}
    for _ in range(runs):
        for name, code in (("pass", "pass"), *IMPORTS.items()):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            samples[name].append(time.perf_counter() - start)
    base = statistics.median(samples.pop("pass"))
    return {name: statistics.median(times) - base for name, times in samples.items()}


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
    times = import_times(args.import_runs)
    for name, seconds in times.items():
        print(f"{name}: {seconds * 1000:.1f} ms")
    ratio = times["import pando_runtime"] / times["import attrs"]
    print(
        f"import pando_runtime / import attrs: {ratio:.2f} (target at most 1.5; medians of "
        f"{args.import_runs} runs each, interpreter start subtracted)"
    )


if __name__ == "__main__":
    main()
