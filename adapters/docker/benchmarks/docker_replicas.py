"""Benchmark: three host replicas over a fleet of two Docker engines, over each lease store.

    python adapters/docker/benchmarks/docker_replicas.py [--apps 300] [--stores etcd,consul]

Starts two of the tests' engines (tests/support/localdocker; needs root and ``docker.io``) and,
in turn, each lease store on loopback (PostgreSQL and etcd from Debian, the project's Consul).
Over each store, three processes of ``examples/replicas/replica_host.py`` (``--adapter fleet``,
the same settings the replica test uses: lease 2 s, renew deadline 1.4 s, retry 0.25 s, each
replica's apps from an image tag of its own) share ``--apps`` apps, each one busybox container.
It prints, per store:

- the first rollout: seconds until the engines hold every app, on one engine each, written by
  its owner (the engines' own container lists), and apps per replica;
- a replica killed (SIGKILL) at rest: the takeover (from the kill until a survivor's journal
  says it owns each of the dead one's apps), p50 and last; and the seconds until the engines
  hold every app again by its new owner (each taken-over app is replaced: a write);
- the checks of the replica test over the engines' event streams: moments an app was on two
  engines, writes outside their writer's ownership (both should be 0);
- the wall time of the store's run.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
for path in (
    ROOT / "tests" / "support",
    ROOT / "adapters" / "docker" / "tests",
    ROOT / "benchmarks",
):
    sys.path.insert(0, str(path))

from _docker_harness import DockerHarness  # noqa: E402 - the test harness, on its path
from _docker_replicas import (  # noqa: E402
    STORES,
    EventRecorder,
    FleetHosts,
    StoreServer,
    placed_twice,
    problems,
)
from replicahosts import until  # noqa: E402

STORE_TIMEOUT = 1.0
"""Seconds per store call, as in the replica test."""


async def run_one(engines: dict[str, Any], store: dict[str, Any], apps: int, work: Path) -> None:
    began = time.monotonic()
    hosts = FleetHosts(work, engines, store, apps, reapply=60.0)
    try:
        with EventRecorder(engines, hosts.owner, work).running() as recorder:
            started = time.monotonic()
            for replica in ("a", "b", "c"):
                hosts.start(replica)
            await until(hosts.converged, within=1800)
            rollout = time.monotonic() - started
            owners = hosts.owners()
            per_replica = sorted(
                sum(1 for o in owners.values() if o == name) for name in hosts.running
            )
            print(
                f"  rollout: {apps} apps in {rollout:.1f} s ({apps / rollout:.1f} apps/s); "
                f"apps per replica {per_replica}"
            )

            victim = hosts.running[f"{hosts.owner}-b"]
            await anyio.sleep(3.0)  # at rest
            killed_at = hosts.kill(victim)
            orphaned = victim.journal().owned()
            await until(hosts.converged, within=1800)
            rewritten = time.time() - killed_at
            journals = hosts.journals()
            taken = sorted(
                min(t for j in journals.values() if (t := j.gained_at(app, after=killed_at)))
                - killed_at
                for app in orphaned
            )
            print(
                f"  SIGKILL of a replica owning {len(orphaned)} apps: taken over after "
                f"{statistics.median(taken):.2f} s p50, {taken[-1]:.2f} s last; every one "
                f"written again by its new owner after {rewritten:.1f} s"
            )
            events = recorder.events()
            print(
                f"  checks over {len(events)} engine events: {len(placed_twice(events))} "
                f"moments an app was on two engines, {len(problems(events, journals))} writes "
                "outside their writer's ownership"
            )
    finally:
        hosts.ensure_gone()
        for engine in engines.values():
            await DockerHarness(f"unix://{engine.socket_path}").remove_owned(hosts.owner)
            for host in [*hosts.gone, *hosts.running.values()]:
                engine.docker("rmi", f"pando.test/busybox:{host.name}", check=False)
    print(f"  wall time: {time.monotonic() - began:.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--apps", type=int, default=300, help="apps the replicas share")
    parser.add_argument("--stores", default=",".join(STORES), help="stores, in turn")
    args = parser.parse_args()
    from localdocker import DockerEngine, missing  # noqa: PLC0415 - after the path above

    absent = missing()
    if absent:
        print(f"docker replicas benchmark: skipped, this machine lacks {', '.join(absent)}")
        return 0
    with ExitStack() as stack:
        engines = {}
        for name in ("one", "two"):
            work = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"pando-rep-{name}-"))
            engines[name] = stack.enter_context(DockerEngine(Path(work)))
        print(f"docker replicas: three replica processes, a fleet of two engines, {args.apps} apps")
        for kind in args.stores.split(","):
            with StoreServer(kind, STORE_TIMEOUT) as server, tempfile.TemporaryDirectory() as work:
                store = {"kind": kind, "settings": server.settings("replicas/")}
                print(f"{kind}:")
                anyio.run(run_one, engines, store, args.apps, Path(work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
