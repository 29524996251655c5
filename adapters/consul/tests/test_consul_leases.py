"""The Consul lease store against the project's Consul (a dev agent of its own).

The store rules (asyncio and trio) and the membership kit (the tests the fake and Kubernetes
pass), then the faults: an address nothing listens on, an agent frozen mid-call.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from localstores import StoreMembershipConformance, served_again, two_clients

import pando_runtime as pr
from pando_runtime.testing.conformance import (
    LeaseStoreConformance,
)

pytestmark = [pytest.mark.anyio, pytest.mark.consul]

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""The faults on one backend: what they show is the store's, not the event loop's."""
HANG = 60.0
"""Seconds after which a call that should have failed is a hang (a bound, not a timing)."""


@pytest.fixture
def lease_settings(consul_agent: Any) -> dict[str, Any]:
    """Settings of a store on the session's agent, under a prefix no other test uses."""
    prefix = f"test/{uuid.uuid4().hex[:12]}/"
    return {"address": consul_agent.http_address, "prefix": prefix, "timeout": 5.0}


@pytest.fixture
async def lease_stores(
    lease_settings: dict[str, Any],
) -> AsyncIterator[tuple[pr.plugin.LeaseStoreClient, pr.plugin.LeaseStoreClient]]:
    """Two clients of one prefix, loaded by name as a host would: two replicas' connections."""
    async with two_clients("consul", lease_settings) as clients:
        yield clients


class TestConsulRules(LeaseStoreConformance):
    pass


class TestConsulMembership(StoreMembershipConformance):
    pass


def test_the_token_is_secret_and_a_bad_prefix_is_refused_at_its_path() -> None:
    (info,) = [i for i in pr.available_lease_stores() if i.name == "consul"]
    assert {f.key: f.secret for f in info.config_fields}["token"] is True
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_lease_store("consul", {"prefix": "/leases", "token": "hunter2-secret"})
    assert [p.path for p in caught.value.problems] == ["prefix"]
    assert "hunter2-secret" not in str(caught.value)


@ASYNCIO_ONLY
async def test_a_stopped_consul_is_unavailable() -> None:
    from localcluster.net import free_ports  # noqa: PLC0415 - the test harness

    settings = {"address": f"http://127.0.0.1:{free_ports(1)[0]}", "token": "hunter2-secret"}
    store = pr.load_lease_store("consul", settings)
    with anyio.fail_after(HANG), pytest.raises(pr.AdapterUnavailable) as caught:
        await store.list_leases("members")
    assert "did not answer: ConnectError" in caught.value.message
    assert "hunter2-secret" not in str(caught.value.to_dict())
    await store.aclose()


@ASYNCIO_ONLY
async def test_a_frozen_consul_fails_calls_within_the_timeout_then_serves_again(
    consul_agent: Any, lease_settings: dict[str, Any]
) -> None:
    store = pr.load_lease_store("consul", {**lease_settings, "timeout": 1.0})
    record = pr.plugin.LeaseRecord(holder="a", renewals=0, duration=10.0)
    created = await store.write_lease("members", "frozen", record, version=None)
    consul_agent.component.pause()
    try:
        with anyio.fail_after(HANG):
            with pytest.raises(pr.AdapterUnavailable) as caught:
                await store.list_leases("members")
            assert "Timeout" in caught.value.message
            with pytest.raises(pr.AdapterUnavailable):
                await store.write_lease("members", "frozen", record, version=created.version)
    finally:
        consul_agent.component.resume()
    (lease,) = await served_again(store, "members")
    assert lease.name == "frozen"  # at either version: a write that timed out may land later
    await store.aclose()
