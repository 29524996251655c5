"""Fencing on a Docker engine: a stale write lands (an engine cannot refuse it) and is repaired.

Two replicas on the harness's engines, their leases in the session's etcd: two Docker adapters
on one engine, then two fleets of the two engines (the fleet's membership moves the epoch, its
Docker member labels and repairs by it). Replica a reaches the engines through proxies that
hold its container create in flight, and the store through one the test cuts: a is a writer
paused past its lease. b takes the app over, moves its epoch and writes it; then a's create
lands, under a's older epoch. b's next apply removes it, though its spec is the one b asks for
(a plain converge would keep it). Everything is asserted from the engine: its containers'
labels, and its event stream's order.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config
from _socket_proxy import SocketProxy
from localstores import EtcdServer
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.cache import ContainerCache

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter

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


Writer = DockerAdapter | FleetAdapter


async def _stall_a_while_b_takes_over(
    a: Writer,
    b: Writer,
    app: str,
    proxies: tuple[list[SocketProxy], SocketProxy],
    memberships: tuple[pr.Membership, pr.Membership],
) -> None:
    """a applies an older plan, with a workload b's plan lacks; its create is held at the
    engines' proxies and its store cut, while b takes the app over and writes it. Then a's
    create lands."""
    engine_proxies, store_proxy = proxies
    ma, mb = memberships
    for proxy in engine_proxies:
        proxy.hold(b"/containers/create")
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
        await until(lambda: sum(p.held for p in engine_proxies) > 0)
        store_proxy.cut()  # a renews nothing more: b takes the app over
        await until(lambda: mb.owns(app))
        assert not ma.owns(app)
        await b.apply(_plan(app, "2"))
        assert b.epochs.moves == 1, "one epoch moved for the app b gained"
        assert b.epochs.reads == 1, "after one read: a's record was unknown to b"
        assert "a" not in outcome, "a's create is still held"
        for proxy in engine_proxies:
            proxy.release()  # a's write lands now, long after b took over
    assert outcome["a"] is None, outcome["a"]


async def _stale_write_repaired(
    harness: DockerHarness,
    owner: str,
    app: str,
    b: Writer,
    b_cache: Callable[[], ContainerCache],
) -> dict[str, Any]:
    """After a's stale write landed: b's next apply removes it; the engine's containers before."""
    stale = await _containers(harness, owner, app)
    assert _epochs(stale) == {"web": "2", "extra": "1"}, "a's write, a's epoch"
    await until(lambda: _has(b_cache(), app, stale["extra"][0]))

    # b asks for the same extra a wrote: only its epoch tells it apart.
    await b.apply(_plan(app, "2", extra=True))
    repaired = await _containers(harness, owner, app)
    assert _epochs(repaired) == {"web": "2", "extra": "2"}
    assert repaired["extra"][0] != stale["extra"][0]
    assert repaired["web"] == stale["web"], "b's own container is kept"
    return stale


async def _in_the_engines_order(
    harness: DockerHarness, owner: str, app: str, stale: dict[str, Any], since: float
) -> None:
    """The engine's own order: b wrote its web, then a's stale create, then b removed it."""
    events = {
        (e["Action"], e["id"][:12]): int(e["timeNano"])
        for e in await _events(harness, owner, since)
        if e["Actor"]["Attributes"].get("io.pando.bundle") == app
    }
    stale_id, b_web = stale["extra"][0][:12], stale["web"][0][:12]
    assert events[("create", b_web)] < events[("create", stale_id)]
    assert events[("create", stale_id)] < events[("destroy", stale_id)]
    lived = (events[("destroy", stale_id)] - events[("create", stale_id)]) / 1e9
    print(f"the stale container lived {lived:.3f} s on the engine")  # noqa: T201 - a figure


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
                await _stall_a_while_b_takes_over(
                    a, b, app, ([engine_proxy], store_proxy), (ma, mb)
                )
                stale = await _stale_write_repaired(harness, owner, app, b, lambda: b.cache)
                store_proxy.restore()
        await _in_the_engines_order(harness, owner, app, stale, since)
    finally:
        await harness.remove_owned(owner)


def _has(cache: ContainerCache, bundle_id: str, container_id: str) -> bool:
    return any(c.id.startswith(container_id) for c in cache.bundle(bundle_id).containers)


def _fleet(hosts: dict[str, str], owner: str, store: dict[str, Any]) -> FleetAdapter:
    members = {
        n: {"adapter": "docker", "settings": adapter_config(h, owner)} for n, h in hosts.items()
    }
    lease_store = {"kind": "etcd", "settings": store}
    return FleetAdapter({"members": members, "lease_store": lease_store})


def _member_cache(fleet: FleetAdapter, member: str) -> ContainerCache:
    adapter = fleet.members[member]
    assert isinstance(adapter, DockerAdapter)
    return adapter.cache


async def test_a_fleets_stale_write_lands_on_its_docker_member_and_the_owners_next_apply_removes_it(
    docker_engine: Any, second_docker_engine: Any, owner: str, etcd_server: EtcdServer
) -> None:
    engines = {"one": docker_engine, "two": second_docker_engine}
    direct = {n: f"unix://{e.socket_path}" for n, e in engines.items()}
    folder = Path(tempfile.mkdtemp(prefix="pdf", dir="/tmp"))  # socket paths are short
    proxies = {
        n: SocketProxy(folder / f"{n}.sock", Path(e.socket_path)) for n, e in engines.items()
    }
    host, port = "127.0.0.1", etcd_server.client_port
    store_proxy = SocketProxy(None, lambda: anyio.connect_tcp(host, port))
    prefix = f"fleet/{owner}/"
    since = time.time()
    try:
        async with contextlib.AsyncExitStack() as running:
            for proxy in (*proxies.values(), store_proxy):
                await running.enter_async_context(proxy.running())
            store_a = {"address": f"http://127.0.0.1:{store_proxy.port}", "prefix": prefix}
            store_b = {"address": etcd_server.address, "prefix": prefix}
            hosts_a = {n: p.host for n, p in proxies.items()}
            async with (
                _fleet(hosts_a, owner, store_a) as a,
                _fleet(direct, owner, store_b) as b,
                a.membership("a", SETTINGS) as ma,
                b.membership("b", SETTINGS) as mb,
            ):
                await until(lambda: ma.members() == mb.members() == {"a", "b"})
                app = _owned_by("a", ["a", "b"])
                await a.apply(_plan(app, "1"))
                member = await a.locate(app)
                assert member is not None
                harness = DockerHarness(direct[member])
                assert _epochs(await _containers(harness, owner, app)) == {"web": "1"}
                await _stall_a_while_b_takes_over(
                    a, b, app, (list(proxies.values()), store_proxy), (ma, mb)
                )
                assert await b.locate(app) == member
                stale = await _stale_write_repaired(
                    harness, owner, app, b, lambda: _member_cache(b, member)
                )
                store_proxy.restore()
        await _in_the_engines_order(harness, owner, app, stale, since)
    finally:
        for address in direct.values():
            await DockerHarness(address).remove_owned(owner)
        shutil.rmtree(folder, ignore_errors=True)
