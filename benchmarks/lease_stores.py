"""Benchmark: each lease store under a membership: call latency, calls per renewal, takeover.

For each store (PostgreSQL and etcd from Debian, the project's Consul; each started on
loopback by the test harness: tests/support/localstores, tests/support/localconsul):

- the latency of a renewal (a conditional write) and of a read of a group, p50/p99 over
  ``--calls`` calls;
- the store calls one replica makes per second at rest, with ``--replicas`` replicas
  joined (counted by a wrapper around the store, over ``--rest`` seconds);
- the takeover after a replica dies (``Membership.crash()``: no renewal, no release): from the
  crash until the survivor owns every bundle the dead one owned, over ``--rounds`` rounds,
  with a 3 s lease (renew deadline 2 s, retry 0.5 s).

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
from pando_runtime.plugin import LeaseRecord, LeaseStoreClient, StoredLease
from pando_runtime.testing import FakeAdapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from localconsul import ConsulAgent  # noqa: E402 - the test harness, on its path
from localstores import EtcdServer, PostgresServer  # noqa: E402

SETTINGS = pr.MembershipSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.5)
BUNDLES = [f"app-{n}" for n in range(100)]


class CountedStore:
    """A store whose calls are counted by kind (``list``, ``write``, ``delete``)."""

    def __init__(self, store: LeaseStoreClient) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        self.calls["list"] += 1
        return await self.store.list_leases(group)

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        self.calls["write"] += 1
        return await self.store.write_lease(group, name, record, version=version)

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        self.calls["delete"] += 1
        await self.store.delete_lease(group, name, version=version)


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


async def latency(store: LeaseStoreClient, calls: int) -> tuple[str, str]:
    record = LeaseRecord(holder="bench", renewals=0, duration=SETTINGS.lease_duration)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    lease = await store.write_lease("members", name, record, version=None)
    writes, reads = [], []
    for n in range(calls):
        started = time.perf_counter()
        lease = await store.write_lease(
            "members", lease.name, renewed(record, n), version=lease.version
        )
        writes.append(time.perf_counter() - started)
        started = time.perf_counter()
        await store.list_leases("members")
        reads.append(time.perf_counter() - started)
    await store.delete_lease("members", lease.name, version=lease.version)
    return _ms(writes), _ms(reads)


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


async def at_rest(store: LeaseStoreClient, replicas: int, seconds: float) -> str:
    names = [f"rest-{uuid.uuid4().hex[:6]}" for _ in range(replicas)]
    async with joined(store, names) as (_, counted):
        before = [Counter(c.calls) for c in counted]
        await anyio.sleep(seconds)
        per = [
            {kind: (c.calls[kind] - b[kind]) / seconds for kind in ("write", "list")}
            for c, b in zip(counted, before, strict=True)
        ]
    writes = statistics.mean(p["write"] for p in per)
    lists = statistics.mean(p["list"] for p in per)
    return (
        f"{writes:.2f} writes and {lists:.2f} reads per replica per second "
        f"(retry period {SETTINGS.retry_period:g} s)"
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
        write, read = await latency(store, args.calls)
        print(f"{name}: a renewal (conditional write) {write}; a read of a group {read}")
        rest = await at_rest(store, args.replicas, args.rest)
        print(f"{name}: at rest with {args.replicas} replicas: {rest}")
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
    args = parser.parse_args()
    names = args.stores.split(",")
    with servers(names) as settings:
        for name in names:
            anyio.run(measure, name, settings[name], args)


if __name__ == "__main__":
    main()
