"""Benchmark: a fleet of two real Docker engines: first applies at once, observe, an engine stopped.

    python adapters/docker/benchmarks/docker_fleet.py [--apps 250] [--burst 200]

Starts two of the tests' engines (tests/support/localdocker: Debian's dockerd 20.10, each in
network namespaces of its own; needs root and ``docker.io``) and a ``fleet`` adapter over them,
each engine's share set to the same room (``capacity_memory_bytes``), every app one small
busybox container with a 64 MiB limit. It prints:

- ``--burst`` first applies at once through the fleet: seconds, errors, apps per engine beside
  what their room says (equal rooms: half each);
- the rest, to ``--apps`` per engine; then one observe of every app through the fleet: daemon
  calls per observe (both engines' transports counted) and the pass's seconds, beside the naive
  way (a container list filtered by the bundle's label, then an inspect per container, on the
  app's engine);
- one engine stopped (as a host's shutdown stops dockerd): seconds until an app of it reads
  ``AdapterUnavailable`` through the fleet; started again: seconds until it is observed again.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from docker_apps import NaiveObserver  # noqa: E402 - beside this file

COMMAND = ("sleep", "2147483647")
LIMIT = 64 * 1024**2
SHARE = 64 * 1024**3
"""Each engine's room for this owner: the same, far more than the apps take."""


def plan(bundle_id: str, image: str) -> pr.BundlePlan:
    web = pr.WorkloadPlan(
        name="main", image=image, command=COMMAND, resources=pr.Resources(memory_bytes=LIMIT)
    )
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=True)


def calls(fleet: FleetAdapter) -> int:
    """Daemon calls every member's transport made so far."""
    members: list[Any] = list(fleet.members.values())
    return sum(sum(m.stats.calls_by_kind.values()) for m in members)


async def apply_all(fleet: FleetAdapter, ids: list[str], image: str) -> tuple[float, int]:
    """Every app's first apply at once: seconds, errors."""
    errors = 0

    async def one(bundle_id: str) -> None:
        nonlocal errors
        try:
            await fleet.apply(plan(bundle_id, image))
        except pr.PandoRuntimeError as error:
            errors += 1
            print(f"    {bundle_id}: {error}")

    started = time.monotonic()
    async with anyio.create_task_group() as group:
        for bundle_id in ids:
            group.start_soon(one, bundle_id)
    return time.monotonic() - started, errors


async def homes(fleet: FleetAdapter, ids: list[str]) -> Counter[str]:
    return Counter([str(await fleet.locate(b)) for b in ids])


def fleet_settings(engines: dict[str, Any], owner: str) -> dict[str, Any]:
    members = {
        name: {
            "adapter": "docker",
            "settings": {
                "host": f"unix://{engine.socket_path}",
                "owner": owner,
                "stop_timeout": 1,
                "cache_max_staleness": 2.0,
                "cache_probe_interval": 0.5,
                "capacity_memory_bytes": SHARE,
            },
        }
        for name, engine in engines.items()
    }
    return {"members": members, "events_retry": [0.2, 0.5, 1.0]}


async def place(fleet: FleetAdapter, apps: int, burst: int, image: str) -> list[str]:
    """``burst`` first applies at once, then the rest to ``apps`` per engine."""
    first = [f"app-{i}" for i in range(burst)]
    seconds, errors = await apply_all(fleet, first, image)
    where = await homes(fleet, first)
    rooms = {n: (await m.largest_fit_for("new")) for n, m in fleet.members.items()}
    print(
        f"  {burst} first applies at once: {seconds:.1f} s, {errors} errors, apps per "
        f"engine {dict(where)} (equal rooms: {burst // 2} each); room left "
        + ", ".join(f"{n} {r.memory_bytes / 1024**3:.2f} GiB" for n, r in rooms.items() if r)
    )
    rest = [f"app-{i}" for i in range(burst, 2 * apps)]
    seconds, errors = await apply_all(fleet, rest, image)
    print(f"  {len(rest)} more first applies at once: {seconds:.1f} s, {errors} errors")
    print(f"  apps per engine: {dict(await homes(fleet, first + rest))}")
    return first + rest


async def observe_pass(
    fleet: FleetAdapter, engines: dict[str, Any], owner: str, ids: list[str]
) -> dict[str, str]:
    """One observe of every app through the fleet, beside the naive way; each app's engine."""
    before = calls(fleet)
    started = time.monotonic()
    for bundle_id in ids:
        await fleet.observe(pr.BundleRef(bundle_id))
    pass_seconds = time.monotonic() - started
    made = calls(fleet) - before
    naive = {
        name: NaiveObserver(f"unix://{engine.socket_path}", owner)
        for name, engine in engines.items()
    }
    located = {b: str(await fleet.locate(b)) for b in ids}
    started = time.monotonic()
    for bundle_id in ids:
        await naive[located[bundle_id]].observe(bundle_id)
    naive_seconds = time.monotonic() - started
    naive_calls = sum(n.calls for n in naive.values())
    for observer in naive.values():
        await observer.client.aclose()
    print(
        f"  observe of {len(ids)} apps: {made / len(ids):.2f} daemon calls per observe, "
        f"{pass_seconds:.2f} s ({pass_seconds / len(ids) * 1000:.2f} ms each); naive: "
        f"{naive_calls / len(ids):.2f} calls, {naive_seconds:.2f} s "
        f"({naive_seconds / len(ids) * 1000:.2f} ms each)"
    )
    return located


async def engine_stopped(fleet: FleetAdapter, engine: Any, bundle_id: str) -> None:
    """Stop ``engine``: seconds until its app reads unavailable, and until it is observed again.

    Both from the moment the daemon is told (its own stop, or start, runs meanwhile).
    """

    async def until(unavailable: bool) -> float:
        started = time.monotonic()
        while True:
            try:
                await fleet.observe(pr.BundleRef(bundle_id))
                if not unavailable:
                    return time.monotonic() - started
            except pr.AdapterUnavailable:
                if unavailable:
                    return time.monotonic() - started
            await anyio.sleep(0.05)

    figures: dict[str, float] = {}

    async def timed(name: str, work: Any) -> None:
        started = time.monotonic()
        await anyio.to_thread.run_sync(work)
        figures[name] = time.monotonic() - started

    async with anyio.create_task_group() as group:
        group.start_soon(timed, "stop", engine.stop)
        figures["unavailable"] = await until(unavailable=True)
    async with anyio.create_task_group() as group:
        group.start_soon(timed, "start", engine.start)
        figures["back"] = await until(unavailable=False)
    print(
        f"  engine stopped: its apps unavailable after {figures['unavailable']:.1f} s (dockerd's "
        f"own stop took {figures['stop']:.1f} s); started again: observed again after "
        f"{figures['back']:.1f} s (dockerd answered /_ping after {figures['start']:.1f} s)"
    )


async def measure(engines: dict[str, Any], apps: int, burst: int, image: str) -> None:
    owner = f"bench{uuid.uuid4().hex[:6]}"
    async with FleetAdapter(fleet_settings(engines, owner)) as fleet:
        ids = await place(fleet, apps, burst, image)
        located = await observe_pass(fleet, engines, owner, ids)
        down = next(b for b in ids if located[b] == "one")
        await engine_stopped(fleet, engines["one"], down)
        for bundle_id in ids:
            await fleet.destroy(pr.BundleRef(bundle_id), pr.DestroyOptions(keep_volumes=False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--apps", type=int, default=250, help="apps per engine")
    parser.add_argument("--burst", type=int, default=200, help="first applies at once")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localdocker import DockerEngine, missing  # noqa: PLC0415 - after the path above

    absent = missing()
    if absent:
        print(f"docker fleet benchmark: skipped, this machine lacks {', '.join(absent)}")
        return 0
    with ExitStack() as stack:
        engines = {}
        for name in ("one", "two"):
            work = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"pando-fleet-{name}-"))
            engines[name] = stack.enter_context(DockerEngine(Path(work)))
        print(f"docker fleet: two engines (dockerd 20.10), {args.apps} apps each")
        anyio.run(measure, engines, args.apps, args.burst, engines["one"].busybox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
