"""Fencing on a Docker engine: a stale write lands (an engine cannot refuse it) and is repaired.

Two replicas' adapters on the harness's engine, their leases in the session's etcd. Replica a
reaches the engine through a proxy that holds its container create in flight, and the store
through one the test cuts: a is a writer paused past its lease. b takes the app over, moves
its epoch and writes it; then a's create lands, under a's older epoch. b's next apply removes
it, though its spec is the one b asks for (a plain converge would keep it). Everything is
asserted from the engine: its containers' labels, and its event stream's order.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config
from _socket_proxy import SocketProxy
from localstores import EtcdServer
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

pytestmark = pytest.mark.anyio

SETTINGS = pr.MembershipSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.25)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the fence is the same code on either backend


def _plan(bundle_id: str, version: str, *, extra: bool = False) -> pr.BundlePlan:
    def workload(name: str, value: str) -> pr.WorkloadPlan:
        return pr.WorkloadPlan(
            name=name, image=BUSYBOX, command=("sleep", "3600"), env={"V": value}
        )

    workloads = (workload("web", version), *((workload("extra", "x"),) if extra else ()))
    return pr.BundlePlan(bundle_id=bundle_id, workloads=workloads)


async def until(check: Callable[[], bool]) -> None:
    """Wait (up to 60 s, a bound that only catches a hang) until ``check()`` holds."""
    with anyio.fail_after(60):
        while not check():  # noqa: ASYNC110 - polls real state
            await anyio.sleep(SETTINGS.retry_period)


async def _containers(harness: DockerHarness, owner: str, bundle_id: str) -> dict[str, Any]:
    """The engine's containers of the app, by workload: their id and epoch label."""
    listed = await harness.docker(
        "ps", "-a", "--filter", f"label=io.pando.bundle={bundle_id}",
        "--filter", f"label=io.pando.owner={owner}", "--format", "{{json .}}",
    )  # fmt: skip
    found: dict[str, Any] = {}
    for line in listed.splitlines():
        row = json.loads(line)
        labels = dict(kv.split("=", 1) for kv in row["Labels"].split(",") if "=" in kv)
        found[labels["io.pando.workload"]] = (row["ID"], labels.get("io.pando.epoch"))
    return found


async def _events(harness: DockerHarness, owner: str, since: float) -> list[dict[str, Any]]:
    """The engine's create and destroy events of the owner's containers since ``since``."""
    out = await harness.docker(
        "events", "--since", f"{since:.3f}", "--until", f"{time.time() + 1:.3f}",
        "--filter", f"label=io.pando.owner={owner}", "--filter", "type=container",
        "--filter", "event=create", "--filter", "event=destroy", "--format", "{{json .}}",
    )  # fmt: skip
    return [json.loads(line) for line in out.splitlines()]


def _owned_by(replica: str, members: list[str]) -> str:
    while True:
        bundle_id = f"fence-{uuid.uuid4().hex[:6]}"
        if pr.rendezvous_owner(bundle_id, members) == replica:
            return bundle_id


async def _stall_a_while_b_takes_over(
    a: DockerAdapter,
    b: DockerAdapter,
    app: str,
    proxies: tuple[SocketProxy, SocketProxy],
    memberships: tuple[pr.Membership, pr.Membership],
) -> None:
    """a applies an older plan, with a workload b's plan lacks; its create is held at the
    engine's proxy and its store cut, while b takes the app over and writes it. Then a's
    create lands."""
    engine_proxy, store_proxy = proxies
    ma, mb = memberships
    engine_proxy.hold(b"/containers/create")
    outcome: dict[str, BaseException | None] = {}

    async def stalled_apply() -> None:
        try:
            await a.apply(_plan(app, "1", extra=True))
        except BaseException as error:  # noqa: BLE001 - the outcome is the test's
            outcome["a"] = error
        else:
            outcome["a"] = None

    async with anyio.create_task_group() as group:
        group.start_soon(stalled_apply)
        await until(lambda: engine_proxy.held > 0)
        store_proxy.cut()  # a renews nothing more: b takes the app over
        await until(lambda: mb.owns(app))
        assert not ma.owns(app)
        await b.apply(_plan(app, "2"))
        assert b.epochs.moves == 1, "one epoch moved for the app b gained"
        assert b.epochs.reads == 1, "after one read: a's record was unknown to b"
        assert "a" not in outcome, "a's create is still held"
        engine_proxy.release()  # a's write lands now, long after b took over
    assert outcome["a"] is None, outcome["a"]


def _epochs(containers: dict[str, Any]) -> dict[str, str]:
    return {workload: epoch for workload, (_, epoch) in containers.items()}


async def test_a_stale_write_lands_under_its_old_epoch_and_the_owners_next_apply_removes_it(
    docker_host: str, owner: str, etcd_server: EtcdServer, engine_proxy: SocketProxy | None
) -> None:
    if engine_proxy is None:
        pytest.skip("the engine is not on a unix socket: no proxy to hold a write in")
    harness = DockerHarness(docker_host)
    host, port = "127.0.0.1", etcd_server.client_port
    store_proxy = SocketProxy(None, lambda: anyio.connect_tcp(host, port))
    prefix = f"docker/{owner}/"
    since = time.time()
    try:
        async with store_proxy.running():
            store_a = {"address": f"http://127.0.0.1:{store_proxy.port}", "prefix": prefix}
            store_b = {"address": etcd_server.address, "prefix": prefix}
            config_a = adapter_config(
                engine_proxy.host, owner, lease_store={"kind": "etcd", "settings": store_a}
            )
            config_b = adapter_config(
                docker_host, owner, lease_store={"kind": "etcd", "settings": store_b}
            )
            async with (
                DockerAdapter(config_a) as a,
                DockerAdapter(config_b) as b,
                a.membership("a", SETTINGS) as ma,
                b.membership("b", SETTINGS) as mb,
            ):
                await until(lambda: ma.members() == mb.members() == {"a", "b"})
                app = _owned_by("a", ["a", "b"])
                await a.apply(_plan(app, "1"))
                assert _epochs(await _containers(harness, owner, app)) == {"web": "1"}
                await _stall_a_while_b_takes_over(a, b, app, (engine_proxy, store_proxy), (ma, mb))
                stale = await _containers(harness, owner, app)
                assert _epochs(stale) == {"web": "2", "extra": "1"}, "a's write, a's epoch"
                await until(lambda: _has(b, app, stale["extra"][0]))

                # b asks for the same extra a wrote: only its epoch tells it apart.
                await b.apply(_plan(app, "2", extra=True))
                repaired = await _containers(harness, owner, app)
                assert _epochs(repaired) == {"web": "2", "extra": "2"}
                assert repaired["extra"][0] != stale["extra"][0]
                assert repaired["web"] == stale["web"], "b's own container is kept"
                store_proxy.restore()

        events = {
            (e["Action"], e["id"][:12]): int(e["timeNano"])
            for e in await _events(harness, owner, since)
            if e["Actor"]["Attributes"].get("io.pando.bundle") == app
        }
        stale_id, b_web = stale["extra"][0][:12], stale["web"][0][:12]
        # The engine's own order: b wrote its web, then a's stale create, then b removed it.
        assert events[("create", b_web)] < events[("create", stale_id)]
        assert events[("create", stale_id)] < events[("destroy", stale_id)]
        lived = (events[("destroy", stale_id)] - events[("create", stale_id)]) / 1e9
        print(f"the stale container lived {lived:.3f} s on the engine")  # noqa: T201 - a figure
    finally:
        await harness.remove_owned(owner)


def _has(adapter: DockerAdapter, bundle_id: str, container_id: str) -> bool:
    return any(c.id.startswith(container_id) for c in adapter.cache.bundle(bundle_id).containers)
