"""Benchmark: catalog sync into a real Consul, from the fake's bundles; batched against single.

Starts ``consul agent -dev`` on loopback (tests/support/localconsul; the binary from
tools/consul/build.sh), runs a BundleSource over a FakeAdapter holding ``--services`` bundles
(one workload, one port each) into a CatalogSyncer over the Consul backend, and prints:

- the first whole set: time until every service is registered, and its HTTP calls;
- HTTP calls per full sync period at steady state (the syncer's and Consul backend's counts);
- change-to-registration latency, p50/p99: a workload turns unhealthy (its registration
  must go) or healthy again (it must come back), from the change on the fake to the write
  acknowledged by Consul.

Then, for each of ``--compare`` sizes (100, 1,000, 5,000), the syncer alone (registrations
handed over directly, a node of their own) through Consul transactions (``/v1/txn``, 64
operations each: the backend's ``write_batch``) and through one request per service (the
same backend seen through its four single calls, as before batches): the first sync, a
resync finding everything equal, and a resync after the catalog lost the node (deregistered
behind the syncer's back, as after an outage of a dev-mode Consul), each in seconds and
Consul HTTP requests.

Prints figures; asserts nothing about time.

    python benchmarks/catalog_sync.py [--services 1000] [--changes 200] [--periods 5]
        [--compare 100,1000,5000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter

if TYPE_CHECKING:
    from pando_runtime_consul import ConsulCatalog

ROOT = Path(__file__).resolve().parents[1]


def plan(index: int) -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=f"svc-{index}",
        workloads=(pr.WorkloadPlan(name="web", image="example/web:1", ports=(pr.Port(8080),)),),
    )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(address: str, services: int, changes: int, periods: int, resync: float) -> None:
    from pando_runtime_consul import ConsulCatalog, ConsulConfig  # noqa: PLC0415

    fake = FakeAdapter()
    plans = [plan(i) for i in range(services)]
    for p in plans:
        await fake.apply(p)
    backend = ConsulCatalog(ConsulConfig(address=address))
    written: dict[str, float] = {}
    events = {"changed": anyio.Event()}

    def on_change(change: pr.catalog.SyncChange) -> None:
        written[f"{change.kind.value} {change.service_id}"] = time.perf_counter()
        events["changed"].set()

    syncer = pr.catalog.CatalogSyncer(
        backend, resync_interval=resync, reap_interval=resync * 2, on_change=on_change
    )
    source = pr.catalog.BundleSource(fake, syncer)
    for p in plans:
        source.track(p)

    start = time.perf_counter()
    async with syncer.running(), source.running():
        with anyio.fail_after(600):
            await syncer.wait_desired_known()
            await syncer.wait_applied()
        first = time.perf_counter() - start
        print(f"first whole set: {services} services registered in {first:.2f} s")
        print(f"  HTTP calls: {dict(backend.requests)}")

        await syncer.wait_full_sync()
        before, calls_before = dict(backend.requests), dict(syncer.calls)
        t0 = time.perf_counter()
        target = syncer.status.full_syncs + periods
        while syncer.status.full_syncs < target:  # the periods as they come, none asked for
            await syncer.wait_pass()
        elapsed = time.perf_counter() - t0
        per = {k: (backend.requests[k] - before.get(k, 0)) / periods for k in backend.requests}
        syncer_per = {k: (syncer.calls[k] - calls_before.get(k, 0)) / periods for k in syncer.calls}
        print(
            f"steady state, {periods} full passes in {elapsed:.1f} s: HTTP calls per period "
            f"{ {k: v for k, v in per.items() if v} } (syncer: "
            f"{ {k: v for k, v in syncer_per.items() if v} })"
        )

        latencies: dict[str, list[float]] = {"deregistered": [], "registered": []}
        for n in range(changes):
            ref = pr.WorkloadRef(f"svc-{n % services}", "web")
            service_id = f"svc-{n % services}:web:8080"
            for healthy, kind in ((False, "deregistered"), (True, "registered")):
                key = f"{kind} {service_id}"
                written.pop(key, None)
                changed_at = time.perf_counter()
                fake.set_health(ref, healthy)
                with anyio.fail_after(60):
                    while key not in written:
                        events["changed"] = anyio.Event()
                        await events["changed"].wait()
                latencies[kind].append(written[key] - changed_at)
        for kind, values in latencies.items():
            print(
                f"change to {kind}: p50 {percentile(values, 0.5) * 1000:.1f} ms, "
                f"p99 {percentile(values, 0.99) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms "
                f"({len(values)} changes, {services} services desired)"
            )
        print(f"  observe calls by the source: {source.observes}")
        removed = await syncer.cleanup()
        print(f"cleanup: {removed} registrations removed")
    await backend.aclose()


class OneByOne:
    """A Consul backend seen through the four single calls only: one request per service.

    Not a ``BatchCatalogBackend``, so the syncer registers and deregisters one service per
    call, 8 in flight: what it did before batches.
    """

    def __init__(self, backend: pr.catalog.CatalogBackend) -> None:
        self.backend = backend

    async def node_services(self, node: str) -> Sequence[pr.catalog.CatalogRegistration]:
        return await self.backend.node_services(node)

    async def register(self, registration: pr.catalog.CatalogRegistration) -> None:
        await self.backend.register(registration)

    async def deregister(self, node: str, service_id: str) -> None:
        await self.backend.deregister(node, service_id)

    async def aclose(self) -> None:
        await self.backend.aclose()


def registration(index: int, node: str) -> pr.catalog.CatalogRegistration:
    return pr.catalog.CatalogRegistration(
        service=f"{node}-{index}",
        service_id=f"{node}-{index}:web:8080",
        address=f"10.{index // 62500}.{index // 250 % 250}.{index % 250 + 1}",
        port=8080,
        tags=("web",),
        metadata={"pando-bundle": f"{node}-{index}"},
        node=node,
    )


async def timed(backend: ConsulCatalog, work: Callable[[], Awaitable[object]]) -> tuple[float, int]:
    """Seconds and Consul HTTP requests ``work`` took."""
    before = sum(backend.requests.values())
    start = time.perf_counter()
    with anyio.fail_after(900):
        await work()
    return time.perf_counter() - start, sum(backend.requests.values()) - before


async def compare(address: str, sizes: list[int]) -> None:
    from pando_runtime_consul import ConsulCatalog, ConsulConfig  # noqa: PLC0415

    print(
        "\nsyncer alone: first sync, resync with everything equal, resync after the node "
        "was lost (seconds, Consul HTTP requests)"
    )
    header = ("services", "writes", "first sync", "resync (equal)", "resync (lost)")
    print("{:>8}  {:<22}  {:>16}  {:>16}  {:>16}".format(*header))
    async with httpx.AsyncClient(base_url=address, timeout=60) as consul:
        for size in sizes:
            for mode in ("transactions", "one request/service"):
                node = f"bench-{size}-{'txn' if mode == 'transactions' else 'single'}"
                consul_backend = ConsulCatalog(ConsulConfig(address=address, timeout=60))
                backend: pr.catalog.CatalogBackend = (
                    consul_backend if mode == "transactions" else OneByOne(consul_backend)
                )
                syncer = pr.catalog.CatalogSyncer(
                    backend, nodes=(node,), resync_interval=3600, reap_interval=3600
                )
                desired = [registration(i, node) for i in range(size)]
                async with syncer.running():

                    async def first() -> None:
                        await syncer.sync(desired)  # noqa: B023 - awaited in this iteration
                        await syncer.wait_applied()  # noqa: B023

                    async def lost() -> None:
                        answer = await consul.put("/v1/catalog/deregister", json={"Node": node})  # noqa: B023
                        answer.raise_for_status()
                        await syncer.wait_full_sync()  # noqa: B023

                    first_sync = await timed(consul_backend, first)
                    equal = await timed(consul_backend, syncer.wait_full_sync)
                    after_loss = await timed(consul_backend, lost)
                    assert syncer.status.healthy, syncer.status.last_error
                    await syncer.cleanup()
                await backend.aclose()
                cells = [f"{t:.2f} s, {n:>5}" for t, n in (first_sync, equal, after_loss)]
                print(f"{size:>8}  {mode:<22}  {cells[0]:>16}  {cells[1]:>16}  {cells[2]:>16}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--resync", type=float, default=5.0, help="seconds between full passes")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument(
        "--compare",
        default="100,1000,5000",
        help="sizes for transactions against one request per service ('' to skip)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localconsul import ConsulAgent  # noqa: PLC0415

    with ConsulAgent() as agent:
        anyio.run(
            run,
            agent.http_address,
            args.services,
            args.changes,
            args.periods,
            args.resync,
            backend=args.backend,
        )
        sizes = [int(size) for size in args.compare.split(",") if size.strip()]
        if sizes:
            anyio.run(compare, agent.http_address, sizes, backend=args.backend)


if __name__ == "__main__":
    main()
