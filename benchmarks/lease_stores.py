"""Benchmark: each lease store under a membership: call latency, calls per renewal, takeover.

For each store (PostgreSQL and etcd from Debian, the project's Consul; each started on
loopback by the test harness: tests/support/localstores, tests/support/localconsul):

- the latency of a renewal (a conditional write), of a read of a group and of a read of one
  lease, p50/p99 over ``--calls`` calls; and of finding one record among ``--records`` of a
  group (as a fleet's placement records are, one per app), by a list of the group and by a
  read of the one record;
- the store calls one replica makes per second at rest, with ``--replicas`` replicas
  joined (counted by a wrapper around the store, over ``--rest`` seconds), and the store
  writes per renewal (the writes counted over the renewals its own lease's count shows);
- the takeover after a replica dies (``Membership.crash()``: no renewal, no release): from the
  crash until the survivor owns every bundle the dead one owned, over ``--rounds`` rounds,
  with a 3 s lease (renew deadline 2 s, retry 0.5 s);
- a fleet's first deploy with and without its placement record, side by side: one replica's
  fleet of two fake members joined over the store places ``--apps`` new apps, once with the
  record (as shipped) and once without (``placer.claim`` unset); store calls per first deploy
  (the record's, counted by a wrapper; the membership's own renewals are not) and time per
  first deploy, p50.

Prints figures; asserts nothing about time.

    python benchmarks/lease_stores.py [--stores postgres,consul,etcd] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter, FleetMembers
from pando_runtime.plugin import LeaseRecord, LeaseStoreClient, StoredLease
from pando_runtime.testing import FakeAdapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from localconsul import ConsulAgent  # noqa: E402 - the test harness, on its path
from localstores import EtcdServer, PostgresServer  # noqa: E402

SETTINGS = pr.MembershipSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.5)
BUNDLES = [f"app-{n}" for n in range(100)]


class CountedStore:
    """A store whose calls are counted by kind (``list``, ``read``, ``write``, ``delete``)."""

    def __init__(self, store: LeaseStoreClient) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        self.calls["list"] += 1
        return await self.store.list_leases(group)

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        self.calls["read"] += 1
        return await self.store.read_lease(group, name)

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        self.calls["write"] += 1
        return await self.store.write_lease(group, name, record, version=version)

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        self.calls["delete"] += 1
        await self.store.delete_lease(group, name, version=version)

    async def aclose(self) -> None:
        await self.store.aclose()


@contextlib.contextmanager
def servers(names: list[str]) -> Iterator[dict[str, dict[str, Any]]]:
    """Each named store's server, started; its settings (a prefix or table of this run)."""
    run = uuid.uuid4().hex[:8]
    with contextlib.ExitStack() as stack:
        settings: dict[str, dict[str, Any]] = {}
        if "postgres" in names:
            pg = stack.enter_context(PostgresServer())
            settings["postgres"] = {"conninfo": pg.conninfo, "table": f"bench_{run}"}
        if "consul" in names:
            consul = stack.enter_context(ConsulAgent())
            settings["consul"] = {"address": consul.http_address, "prefix": f"bench/{run}/"}
        if "etcd" in names:
            etcd = stack.enter_context(EtcdServer())
            settings["etcd"] = {"address": etcd.address, "prefix": f"bench/{run}/"}
        yield settings


def _ms(values: list[float]) -> str:
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"p50 {statistics.median(values) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"


async def latency(store: LeaseStoreClient, calls: int) -> tuple[str, str, str]:
    record = LeaseRecord(holder="bench", renewals=0, duration=SETTINGS.lease_duration)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    lease = await store.write_lease("members", name, record, version=None)
    writes, reads, one = [], [], []
    for n in range(calls):
        started = time.perf_counter()
        lease = await store.write_lease(
            "members", lease.name, renewed(record, n), version=lease.version
        )
        writes.append(time.perf_counter() - started)
        started = time.perf_counter()
        await store.list_leases("members")
        reads.append(time.perf_counter() - started)
        started = time.perf_counter()
        await store.read_lease("members", lease.name)
        one.append(time.perf_counter() - started)
    await store.delete_lease("members", lease.name, version=lease.version)
    return _ms(writes), _ms(reads), _ms(one)


async def record_reads(store: LeaseStoreClient, records: int, calls: int) -> str:
    """A record found among ``records`` of a group: by a list of the group, and read alone."""
    record = LeaseRecord(holder="bench", renewals=1, duration=0.0, view=("member-a",))
    written = [
        await store.write_lease("placements", f"app-{n}", record, version=None)
        for n in range(records)
    ]
    listed, alone = [], []
    for n in range(calls):
        name = written[n % records].name
        started = time.perf_counter()
        assert any(lease.name == name for lease in await store.list_leases("placements"))
        listed.append(time.perf_counter() - started)
        started = time.perf_counter()
        assert await store.read_lease("placements", name) is not None
        alone.append(time.perf_counter() - started)
    for lease in written:
        await store.delete_lease("placements", lease.name, version=lease.version)
    return f"listing the group {_ms(listed)}; reading it alone {_ms(alone)}"


def renewed(record: LeaseRecord, n: int) -> LeaseRecord:
    return LeaseRecord(holder=record.holder, renewals=n + 1, duration=record.duration)


@contextlib.asynccontextmanager
async def joined(
    store: LeaseStoreClient, names: list[str]
) -> AsyncIterator[tuple[list[pr.Membership], list[CountedStore]]]:
    counted = [CountedStore(store) for _ in names]
    async with contextlib.AsyncExitStack() as stack:
        memberships = []
        for name, one in zip(names, counted, strict=True):
            fake = await stack.enter_async_context(FakeAdapter(lease_store=one))
            memberships.append(await stack.enter_async_context(fake.membership(name, SETTINGS)))
        with anyio.fail_after(60):
            while not all(m.members() == set(names) for m in memberships):
                await anyio.sleep(0.05)
        yield memberships, counted


async def renewals(store: LeaseStoreClient, names: list[str]) -> dict[str, int]:
    """Each replica's renewal count, from its own lease in the store."""
    return {
        lease.name: lease.record.renewals
        for lease in await store.list_leases("members")
        if lease.name in names
    }


async def at_rest(store: LeaseStoreClient, replicas: int, seconds: float) -> str:
    names = [f"rest-{uuid.uuid4().hex[:6]}" for _ in range(replicas)]
    async with joined(store, names) as (_, counted):
        before = [Counter(c.calls) for c in counted]
        renewed_before = await renewals(store, names)
        await anyio.sleep(seconds)
        renewed_after = await renewals(store, names)
        per = [
            {kind: (c.calls[kind] - b[kind]) / seconds for kind in ("write", "list")}
            for c, b in zip(counted, before, strict=True)
        ]
        pairs = zip(counted, before, strict=True)
        writes_made = sum(c.calls["write"] - b["write"] for c, b in pairs)
    renewals_made = sum(renewed_after[n] - renewed_before[n] for n in names)
    writes = statistics.mean(p["write"] for p in per)
    lists = statistics.mean(p["list"] for p in per)
    return (
        f"{writes:.2f} writes and {lists:.2f} reads per replica per second "
        f"(retry period {SETTINGS.retry_period:g} s); {writes_made / renewals_made:.2f} writes "
        f"per renewal ({writes_made} writes, {renewals_made} renewals)"
    )


async def first_deploys(store_name: str, settings: dict[str, Any], apps: int, record: bool) -> str:
    """``apps`` first deploys by one joined replica's fleet of two fakes (see the module)."""
    config = {"members": {}, "lease_store": {"kind": store_name, "settings": settings}}
    members = FleetMembers(adapters={"a": FakeAdapter(), "b": FakeAdapter()}, control="a")
    run = uuid.uuid4().hex[:6]
    async with (
        FleetAdapter(config, source=members) as fleet,
        fleet.membership(f"fd-{run}", SETTINGS),
    ):
        assert fleet.replicas.store is not None
        counted = CountedStore(fleet.replicas.store)
        fleet.replicas.store = counted  # the records' calls only: the membership holds its own
        if not record:
            fleet.placer.claim = None
        times = []
        for n in range(apps):
            plan = pr.BundlePlan(
                bundle_id=f"fd-{run}-{n}",
                workloads=(pr.WorkloadPlan(name="web", image="registry.example/app:1"),),
            )
            started = time.perf_counter()
            await fleet.apply(plan)
            times.append(time.perf_counter() - started)
        deployed = Counter(counted.calls)
        for n in range(apps):  # the records go with the volumes
            bundle = pr.BundleRef(f"fd-{run}-{n}")
            await fleet.destroy(bundle, pr.DestroyOptions(keep_volumes=False))
        destroyed = counted.calls - deployed

    def per_app(calls: Counter[str]) -> str:
        kinds = ("write", "read", "list", "delete")
        return ", ".join(f"{calls[k] / apps:.2f} {k}s" for k in kinds)

    return (
        f"{'with' if record else 'without'} the placement record: first deploy p50 "
        f"{statistics.median(times) * 1000:.2f} ms; store calls per first deploy "
        f"{per_app(deployed)}; per destroy with its volumes {per_app(destroyed)}"
    )


async def takeover(store: LeaseStoreClient) -> float:
    names = [f"to-{uuid.uuid4().hex[:6]}", f"to-{uuid.uuid4().hex[:6]}"]
    async with joined(store, names) as (memberships, _):
        survivor, victim = memberships
        with anyio.fail_after(60):
            while not any(victim.owns(b) for b in BUNDLES):
                await anyio.sleep(0.05)
        theirs = [b for b in BUNDLES if victim.owns(b)]
        crashed = time.perf_counter()
        victim.crash()
        with anyio.fail_after(60):
            while not all(survivor.owns(b) for b in theirs):
                await anyio.sleep(0.01)
        return time.perf_counter() - crashed


async def measure(name: str, settings: dict[str, Any], args: argparse.Namespace) -> None:
    async with contextlib.aclosing(pr.load_lease_store(name, settings)) as store:
        write, read, one = await latency(store, args.calls)
        print(
            f"{name}: a renewal (conditional write) {write}; a read of a group {read}; "
            f"a read of one lease {one}"
        )
        found = await record_reads(store, args.records, args.calls)
        print(f"{name}: one placement record among {args.records}: {found}")
        rest = await at_rest(store, args.replicas, args.rest)
        print(f"{name}: at rest with {args.replicas} replicas: {rest}")
        for record in (False, True):
            print(f"{name}: {await first_deploys(name, settings, args.apps, record)}")
        times = [await takeover(store) for _ in range(args.rounds)]
        print(
            f"{name}: takeover after a crash ({SETTINGS.lease_duration:g} s lease, "
            f"{args.rounds} rounds): p50 {statistics.median(times):.2f} s, max {max(times):.2f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="postgres,consul,etcd")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--rest", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--apps", type=int, default=50)
    parser.add_argument("--records", type=int, default=300)
    args = parser.parse_args()
    names = args.stores.split(",")
    with servers(names) as settings:
        for name in names:
            anyio.run(measure, name, settings[name], args)


if __name__ == "__main__":
    main()
