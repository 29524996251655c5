"""The etcd lease store against a real etcd (Debian's 3.4, a member of its own).

The store rules and the membership kit (the tests the fake and Kubernetes pass), then the
faults: an address nothing listens on, an etcd frozen mid-call.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from localstores import EtcdServer, StoreMembershipConformance, served_again

import pando_runtime as pr
from pando_runtime.testing.conformance import (
    LeaseStoreConformance,
)

pytestmark = pytest.mark.anyio

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""The faults on one backend: what they show is the store's, not the event loop's."""

HANG = 60.0
"""Seconds after which a call that should have failed is a hang (a bound, not a timing)."""


class TestEtcdRules(LeaseStoreConformance):
    pass


class TestEtcdMembership(StoreMembershipConformance):
    pass


def test_a_bad_address_or_prefix_is_refused_at_its_path() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_lease_store("etcd", {"address": "etcd:2379", "prefix": "no-slash"})
    assert sorted(p.path for p in caught.value.problems) == ["address", "prefix"]


@ASYNCIO_ONLY
async def test_a_stopped_etcd_is_unavailable() -> None:
    from localcluster.net import free_ports  # noqa: PLC0415 - the test harness

    store = pr.load_lease_store("etcd", {"address": f"http://127.0.0.1:{free_ports(1)[0]}"})
    with anyio.fail_after(HANG), pytest.raises(pr.AdapterUnavailable) as caught:
        await store.list_leases("members")
    assert "did not answer: ConnectError" in caught.value.message
    await store.aclose()


@ASYNCIO_ONLY
async def test_a_frozen_etcd_fails_calls_within_the_timeout_then_serves_again(
    etcd_server: EtcdServer, etcd_settings: dict[str, Any]
) -> None:
    store = pr.load_lease_store("etcd", {**etcd_settings, "timeout": 1.0})
    record = pr.plugin.LeaseRecord(holder="a", renewals=0, duration=10.0)
    created = await store.write_lease("members", "frozen", record, version=None)
    etcd_server.freeze()
    try:
        with anyio.fail_after(HANG):
            with pytest.raises(pr.AdapterUnavailable) as caught:
                await store.list_leases("members")
            assert "Timeout" in caught.value.message
            with pytest.raises(pr.AdapterUnavailable):
                await store.write_lease("members", "frozen", record, version=created.version)
    finally:
        etcd_server.thaw()
    (lease,) = await served_again(store, "members")
    assert lease.name == "frozen"  # at either version: a write that timed out may land later
    await store.aclose()
