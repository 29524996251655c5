"""The PostgreSQL lease store against a real PostgreSQL (Debian's, a cluster of its own).

The store rules and the membership kit (the tests the fake and Kubernetes pass), then the
faults: a server that refuses connections, a server frozen mid-call, a replica cut from it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import anyio
import psycopg
import pytest
from localstores import PostgresServer, StoreHarness, StoreMembershipConformance, served_again
from pando_runtime_postgres import PostgresLeaseStore

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import (
    LeaseStoreConformance,
)

pytestmark = pytest.mark.anyio

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""The faults on one backend: what they show is the store's, not the event loop's."""

HANG = 60.0
"""Seconds after which a call that should have failed is a hang (a bound, not a timing)."""


class TestPostgresRules(LeaseStoreConformance):
    pass


class TestPostgresMembership(StoreMembershipConformance):
    pass


def test_the_store_is_listed_with_its_settings_and_its_password_is_secret() -> None:
    (info,) = [i for i in pr.available_lease_stores() if i.name == "postgres"]
    assert info.problem is None
    assert info.api_version == "1.7"
    secret = {f.key: f.secret for f in info.config_fields}
    assert secret["password"] is True
    assert secret["conninfo"] is False
    store = pr.load_lease_store("postgres", {"password": "hunter2-secret"})
    assert isinstance(store, PostgresLeaseStore)
    assert "hunter2-secret" not in repr(store.config)


def test_a_password_in_the_conninfo_or_a_bad_table_is_refused_at_its_path() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_lease_store(
            "postgres", {"conninfo": "host=db password=hunter2-secret", "table": "x; drop"}
        )
    assert sorted(p.path for p in caught.value.problems) == ["conninfo", "table"]
    assert "hunter2-secret" not in str(caught.value)


@ASYNCIO_ONLY
async def test_a_stopped_server_is_unavailable_and_the_password_never_shown() -> None:
    from localcluster.net import free_ports  # noqa: PLC0415 - the test harness

    settings = {
        "conninfo": f"host=127.0.0.1 port={free_ports(1)[0]} user=pando",
        "password": "hunter2-secret",
        "timeout": 5.0,
    }
    store = pr.load_lease_store("postgres", settings)
    with anyio.fail_after(HANG), pytest.raises(pr.AdapterUnavailable) as caught:
        await store.list_leases("members")
    assert "could not be reached" in caught.value.message
    assert "hunter2-secret" not in str(caught.value.to_dict())
    await store.aclose()


@ASYNCIO_ONLY
async def test_a_frozen_server_fails_calls_within_the_timeout_then_serves_again(
    postgres_server: PostgresServer, postgres_settings: dict[str, Any]
) -> None:
    store = pr.load_lease_store("postgres", {**postgres_settings, "timeout": 1.0})
    record = pr.plugin.LeaseRecord(holder="a", renewals=0, duration=10.0)
    created = await store.write_lease("members", "frozen", record, version=None)
    postgres_server.freeze()
    try:
        with anyio.fail_after(HANG):
            with pytest.raises(pr.AdapterUnavailable) as caught:
                await store.list_leases("members")
            assert "did not answer within 1 s" in caught.value.message
            with pytest.raises(pr.AdapterUnavailable):
                await store.write_lease("members", "frozen", record, version=created.version)
    finally:
        postgres_server.thaw()
    (lease,) = await served_again(store, "members")
    assert lease.name == "frozen"  # at either version: a write that timed out may land later
    await store.aclose()


async def _until(check: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(HANG):
        while not check():  # noqa: ASYNC110 - ownership changes have no event
            await anyio.sleep(0.05)
    assert check(), what


@ASYNCIO_ONLY
async def test_a_replica_cut_from_the_store_stops_owning_and_the_other_takes_over(
    postgres_server: PostgresServer, postgres_settings: dict[str, Any], toxiproxy_server: Any
) -> None:
    """A partition (a proxy that passes no data any more) between one replica and PostgreSQL."""
    toxiproxy = toxiproxy_server.client
    proxy = toxiproxy.create(f"pg-{uuid.uuid4().hex[:8]}", f"127.0.0.1:{postgres_server.port}")
    proxied = postgres_server.conninfo.replace(f"port={postgres_server.port}", f"port={proxy.port}")
    settings = StoreHarness.membership_settings
    direct = pr.load_lease_store("postgres", postgres_settings)
    cut = pr.load_lease_store(
        "postgres", {**postgres_settings, "conninfo": proxied, "timeout": 1.0}
    )
    async with (
        FakeAdapter(lease_store=direct) as first,
        FakeAdapter(lease_store=cut) as second,
        first.membership("a", settings) as a,
        second.membership("b", settings) as b,
    ):
        await _until(lambda: a.members() == b.members() == {"a", "b"}, "both joined")
        bundle = next(f"app-{n}" for n in range(64) if pr.rendezvous_owner(f"app-{n}", "ab") == "b")
        await _until(lambda: b.owns(bundle), "b owns what rendezvous hashing gives it")
        with toxiproxy.toxic(proxy.name, "timeout", timeout=0):
            await _until(lambda: not b.owns(bundle), "the cut replica stops owning")
            await _until(lambda: a.members() == {"a"} and a.owns(bundle), "the other takes over")
            assert not b.owns(bundle)
        await _until(lambda: a.members() == b.members() == {"a", "b"}, "healed, it rejoins")
        await _until(lambda: b.owns(bundle), "the bundle goes back to it, drained")
        assert not a.owns(bundle)
    await direct.aclose()
    await cut.aclose()


async def test_a_user_with_the_documented_grants_only_uses_a_table_made_for_it(
    postgres_settings: dict[str, Any],
) -> None:
    """The table made by an administrator; the store's user may not create, only what the docs
    list: SELECT, INSERT, UPDATE, DELETE on the table, USAGE on its sequence."""
    table, user = postgres_settings["table"], f"u_{uuid.uuid4().hex[:8]}"
    admin = pr.load_lease_store("postgres", postgres_settings)
    await admin.list_leases("members")  # creates the table and its sequence
    await admin.aclose()
    grants = [
        f"CREATE ROLE {user} LOGIN",
        f"REVOKE CREATE ON SCHEMA public FROM {user}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {user}",
        f"GRANT USAGE ON SEQUENCE {table}_versions TO {user}",
    ]
    with psycopg.connect(postgres_settings["conninfo"], autocommit=True) as connection:
        for statement in grants:
            connection.execute(statement)
    conninfo = postgres_settings["conninfo"].replace("user=pando", f"user={user}")
    store = pr.load_lease_store("postgres", {**postgres_settings, "conninfo": conninfo})
    record = pr.plugin.LeaseRecord(holder="a", renewals=0, duration=10.0)
    created = await store.write_lease("members", "granted", record, version=None)
    assert [lease.name for lease in await store.list_leases("members")] == ["granted"]
    await store.delete_lease("members", "granted", version=created.version)
    await store.aclose()
