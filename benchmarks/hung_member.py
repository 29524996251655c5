"""Benchmark: a fleet of two Docker engines, one of them hung (dockerd frozen with SIGSTOP).

    python benchmarks/hung_member.py [--rounds 3]

Starts two of the tests' engines (tests/support/localdocker: Debian's dockerd 20.10, each in
network namespaces of its own; needs root and ``docker.io``) and a ``fleet`` adapter over them
with every default (``cache_max_staleness`` 30 s, ``cache_probe_interval`` 5 s,
``answer_timeout`` 5 s, the fleet's ``answer_deadline`` 10 s). One app is put on each engine;
then it prints, each the median of ``--rounds``:

- a first deploy with both engines answering (the placement's own cost, and the container's);
- engine ``one`` frozen: a first deploy at once (before its probe has found it out), and once
  its probe has (the time the hung member adds is the difference from the first line);
- from the freeze: seconds until a call in flight on it fails, until its app's ``observe``
  refuses, until its app is observed again after SIGCONT.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ("sleep", "2147483647")
LIMIT = pr.Resources(cpu_millis=100, memory_bytes=64 * 1024**2)


def plan(image: str, name: str) -> pr.BundlePlan:
    web = pr.WorkloadPlan(name="main", image=image, command=COMMAND, resources=LIMIT)
    bundle_id = f"{name}-{uuid.uuid4().hex[:6]}"
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=True)


async def seconds(work: Callable[[], Awaitable[Any]]) -> float:
    started = time.monotonic()
    await work()
    return time.monotonic() - started


async def until(check: Callable[[], Awaitable[bool]], step: float = 0.05) -> None:
    while not await check():
        await anyio.sleep(step)


async def found_silent(member: Any) -> bool:
    """Whether the member's probe has found its daemon silent (the adapter's own word)."""
    await anyio.lowlevel.checkpoint()
    return bool(member.transport.answering.silent)


async def refuses(fleet: FleetAdapter, bundle_id: str) -> bool:
    try:
        await fleet.observe(pr.BundleRef(bundle_id))
    except pr.AdapterUnavailable:
        return True
    return False


async def runs(fleet: FleetAdapter, bundle_id: str) -> bool:
    try:
        observed = await fleet.observe(pr.BundleRef(bundle_id))
    except pr.AdapterUnavailable:
        return False
    return bool(observed.workloads) and observed.workloads[0].running


async def one_round(fleet: FleetAdapter, engines: dict[str, Any], image: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    hung = plan(image, "hung")
    await fleet.apply(hung)
    frozen_name = str(await fleet.locate(hung.bundle_id))
    await until(lambda: runs(fleet, hung.bundle_id))
    figures["first deploy, both answering"] = await seconds(lambda: fleet.apply(plan(image, "a")))
    member: Any = fleet.members[frozen_name]
    with engines[frozen_name].frozen():
        frozen_at = time.monotonic()
        in_flight = 0.0

        async def call_in_flight() -> None:
            nonlocal in_flight
            try:
                await member.in_use()
            except pr.AdapterUnavailable:
                in_flight = time.monotonic() - frozen_at

        async with anyio.create_task_group() as group:
            group.start_soon(call_in_flight)
            figures["first deploy, one engine just frozen"] = await seconds(
                lambda: fleet.apply(plan(image, "b"))
            )
        figures["a call in flight on it fails after"] = in_flight
        await until(lambda: found_silent(member))
        figures["first deploy, the frozen engine found silent"] = await seconds(
            lambda: fleet.apply(plan(image, "c"))
        )
        await until(lambda: refuses(fleet, hung.bundle_id))
        figures["its app's observe refuses after (from the freeze)"] = time.monotonic() - frozen_at
    thawed_at = time.monotonic()
    await until(lambda: runs(fleet, hung.bundle_id))
    figures["thawed: its app observed running again after"] = time.monotonic() - thawed_at
    return figures


async def measure(engines: dict[str, Any], rounds: int, image: str) -> None:
    owner = f"bench{uuid.uuid4().hex[:6]}"
    members = {
        name: {"adapter": "docker", "settings": {"host": f"unix://{e.socket_path}", "owner": owner}}
        for name, e in engines.items()
    }
    every: dict[str, list[float]] = {}
    async with FleetAdapter({"members": members}) as fleet:
        for _ in range(rounds):
            for name, value in (await one_round(fleet, engines, image)).items():
                every.setdefault(name, []).append(value)
        for bundle_id in await fleet.held_bundles():
            await fleet.destroy(pr.BundleRef(bundle_id))
    for name, values in every.items():
        low, high = min(values), max(values)
        print(f"  {name}: {statistics.median(values):.2f} s (min {low:.2f}, max {high:.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localdocker import DockerEngine, missing  # noqa: PLC0415 - after the path above

    absent = missing()
    if absent:
        print(f"hung member benchmark: skipped, this machine lacks {', '.join(absent)}")
        return 0
    with ExitStack() as stack:
        engines = {}
        for name in ("one", "two"):
            work = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"pando-hung-{name}-"))
            engines[name] = stack.enter_context(DockerEngine(Path(work)))
        print(f"hung member: a fleet of two engines (dockerd 20.10), {args.rounds} rounds")
        anyio.run(measure, engines, args.rounds, engines["one"].busybox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
