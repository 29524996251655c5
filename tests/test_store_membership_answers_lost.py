"""A replica whose lease-store answers are lost: the store applies its renewals, the replica
never hears back. Found by the Docker replica runs (``docs/replicas.md``): its lease moved to a
version it never saw, and it stayed locked out (each renewal a conflict, never read back). Shown
here on the fake runtime over the session's etcd through a Toxiproxy proxy (``reset_peer`` on
the answers' way), where it is deterministic: once the answers arrive again, it owns again.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from localstores import EtcdServer

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter

pytestmark = pytest.mark.anyio

SETTINGS = pr.MembershipSettings(lease_duration=2.0, renew_deadline=1.4, retry_period=0.25)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def toxiproxy() -> Iterator[Any]:
    from localcluster import ToxiproxyServer  # noqa: PLC0415 - the test harness

    with ToxiproxyServer() as server:
        yield server.client


async def _owns(membership: pr.Membership, bundle_id: str, within: float, *, it: bool) -> None:
    """Wait until ``membership.owns(bundle_id)`` is ``it`` (a local check, polled)."""
    with anyio.fail_after(within):
        while membership.owns(bundle_id) is not it:  # noqa: ASYNC110 - no event to wait on
            await anyio.sleep(0.05)


async def test_a_replica_whose_store_answers_were_lost_owns_again_once_they_arrive(
    etcd_server: EtcdServer, toxiproxy: Any
) -> None:
    proxy = toxiproxy.create(f"etcd-{uuid.uuid4().hex[:8]}", etcd_server.address[7:])
    prefix = f"answers-lost/{uuid.uuid4().hex[:8]}/"
    settings = {"address": f"http://{proxy.listen}", "prefix": prefix, "timeout": 1.0}
    async with (
        contextlib.aclosing(pr.load_lease_store("etcd", settings)) as store,
        FakeAdapter(lease_store=store).membership("a", SETTINGS) as membership,
    ):
        await _owns(membership, "app-1", within=30, it=True)
        with toxiproxy.toxic(proxy.name, "reset_peer", stream="downstream", timeout=0):
            await _owns(membership, "app-1", within=30, it=False)  # its renewals unanswered
            await anyio.sleep(SETTINGS.lease_duration)
        # A bound that only catches a replica that never owns again (healed, it owns again
        # within a few retry periods).
        await _owns(membership, "app-1", within=5 * SETTINGS.lease_duration, it=True)
