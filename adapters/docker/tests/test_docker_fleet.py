"""A fleet of real Docker engines: the kit, placement by room, engines going silent, restarts.

Two engines of the harness (``docker_engine`` and ``second_docker_engine``), each in network
namespaces of its own, are the members; the fleet reaches each over its unix socket. What is
counted is counted on the engines themselves (their own container and network lists), never
through the adapter.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from _docker_harness import DockerHarness
from _docker_tests import SLEEP, adapter_config
from _socket_proxy import SocketProxy

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    EventConformance,
    ExecConformance,
    FleetHarness,
    LogConformance,
    VolumeConformance,
)

MiB = 1024**2
GiB = 1024**3


def _host(engine: Any) -> str:
    return f"unix://{engine.socket_path}"


@pytest.fixture
def engines(docker_engine: Any, second_docker_engine: Any) -> dict[str, Any]:
    """The two engines by member name, each with the Squid image of restricted egress."""
    from localdocker import SQUID, squid_image  # noqa: PLC0415 - only with the harness

    for engine in (docker_engine, second_docker_engine):
        if SQUID not in engine.api.image_names():
            engine.load_image(squid_image().archive)
    return {"one": docker_engine, "two": second_docker_engine}


@pytest.fixture
def fleet_owner() -> str:
    return f"f{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def proxies(engines: dict[str, Any]) -> AsyncIterator[dict[str, SocketProxy]]:
    """A proxy in front of each engine that a test can cut (the kit's stale-cache hooks)."""
    folder = Path(tempfile.mkdtemp(prefix="pdf", dir="/tmp"))  # socket paths are short
    try:
        async with contextlib.AsyncExitStack() as running:
            made = {}
            for name, engine in engines.items():
                proxy = SocketProxy(folder / f"{name}.sock", Path(engine.socket_path))
                await running.enter_async_context(proxy.running())
                made[name] = proxy
            yield made
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _member(host: str, owner: str, **more: Any) -> dict[str, Any]:
    settings = adapter_config(host, owner, cache_max_staleness=3.0, cache_probe_interval=0.5)
    return {"adapter": "docker", "settings": {**settings, **more}}


def _fleet_settings(engines: dict[str, Any], owner: str, **more: Any) -> dict[str, Any]:
    members = {name: _member(_host(engine), owner) for name, engine in engines.items()}
    return {"members": members, "events_retry": [0.2, 0.5, 1.0], **more}


async def _cleanup(engines: dict[str, Any], owner: str) -> None:
    for engine in engines.values():
        await DockerHarness(_host(engine)).remove_owned(owner)
        for what in ("ps", "network"):
            assert not await _on_engine(engine, owner, what), f"{owner}'s {what} left"


# -- the conformance kit -------------------------------------------------------------------


class _TwoEngines:
    """The kit's adapter and harness: two engines as one runtime."""

    single_pool: ClassVar[bool] = False

    @pytest.fixture
    async def adapter(
        self, engines: dict[str, Any], proxies: dict[str, SocketProxy], fleet_owner: str
    ) -> AsyncIterator[FleetAdapter]:
        from localdocker import SQUID  # noqa: PLC0415

        members = {
            name: _member(proxies[name].host, fleet_owner, egress_gateway_image=str(SQUID))
            for name in engines
        }
        try:
            async with FleetAdapter({"members": members, "events_retry": [0.2]}) as fleet:
                yield fleet
        finally:
            await _cleanup(engines, fleet_owner)

    @pytest.fixture
    def harness(
        self, engines: dict[str, Any], proxies: dict[str, SocketProxy]
    ) -> ConformanceHarness:
        members = {n: DockerHarness(_host(e), proxies[n], e) for n, e in engines.items()}
        return FleetHarness(members, primary="one")


class TestDockerFleetTrioConformance(
    _TwoEngines, EventConformance, LogConformance, ExecConformance, VolumeConformance
):
    """On trio, what differs between the backends: the streams (the merged events, logs, exec,
    volume archives through the fleet); the rest is the same code on either.

    The whole kit over two engines runs in ``test_docker_fleet_remote.py``, its members reached
    over SSH and TLS (the fleet's code is the same whatever the way in); a fleet mixing runtimes
    passes it in the Kubernetes adapter's tests (an engine and a cluster).
    """

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "trio"


# -- placement, silence, restarts ------------------------------------------------------------


def _plan(bundle_id: str, *, memory: int = 64 * MiB, first_deploy: bool = True) -> pr.BundlePlan:
    web = pr.WorkloadPlan(
        name="web",
        image="pando.test/busybox:1",
        command=SLEEP,
        resources=pr.Resources(memory_bytes=memory),
    )
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,), first_deploy=first_deploy)


async def _on_engine(engine: Any, owner: str, what: str = "ps") -> Counter[str]:
    """Bundles by how many containers (``ps``) or networks (``network``) of ``owner`` the
    engine itself lists for each."""
    label = f"label=io.pando.owner={owner}"
    fmt = '{{.Label "io.pando.bundle"}}'
    args = ("ps", "-a") if what == "ps" else ("network", "ls")
    out = await anyio.to_thread.run_sync(
        lambda: engine.docker(*args, "--filter", label, "--format", fmt)
    )
    return Counter(line for line in out.stdout.split() if line)


@pytest.fixture
def anyio_backend() -> str:
    """The tests below show what a fleet does; the backends differ in none of it."""
    return "asyncio"


pytestmark = pytest.mark.anyio


async def test_bad_settings_are_refused_every_problem_at_its_path(
    engines: dict[str, Any], fleet_owner: str
) -> None:
    one = _host(engines["one"])
    settings = {
        "members": {
            "host-a": {"adapter": "docker", "settings": {"host": "ftp://nowhere", "owner": "x"}},
            "host-b": {"adapter": "dockr", "settings": {}},
            "host-c": _member(one, fleet_owner),
            "host-d": _member(one, fleet_owner),
        }
    }
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_adapter("fleet", settings)
    paths = [p.path for p in caught.value.problems]
    assert paths == [
        "members['host-a'].settings.host",
        "members['host-b'].adapter",
        "members['host-d'].settings",
    ], caught.value.problems


@pytest.fixture
async def fleet(engines: dict[str, Any], fleet_owner: str) -> AsyncIterator[FleetAdapter]:
    """A fleet of the two engines; what it made is removed at the end."""
    try:
        async with FleetAdapter(_fleet_settings(engines, fleet_owner)) as made:
            yield made
    finally:
        await _cleanup(engines, fleet_owner)


async def test_forty_apps_over_engines_of_unequal_room_go_by_room_and_stay(
    fleet: FleetAdapter, engines: dict[str, Any], fleet_owner: str
) -> None:
    big = await fleet.apply(_plan("big", memory=4 * GiB))
    full = big.details["member"]
    roomy = "two" if full == "one" else "one"
    for i in range(40):
        await fleet.apply(_plan(f"app-{i}", memory=256 * MiB))
    # 4 GiB less room on one engine: the other takes the first 16, then they alternate.
    on = {name: await _on_engine(engine, fleet_owner) for name, engine in engines.items()}
    assert len(on[roomy]) == 28
    assert len(on[full]) == 13
    assert set(on[full]).isdisjoint(on[roomy]), "no app on two engines"
    # Re-applied (changed, and as a first deploy): each stays, nothing placed again.
    for i in range(0, 40, 5):
        bundle_id = f"app-{i}"
        home = "one" if bundle_id in on["one"] else "two"
        again = await fleet.apply(_plan(bundle_id, memory=128 * MiB))
        assert again.details["member"] == home
    again_on = {name: await _on_engine(engine, fleet_owner) for name, engine in engines.items()}
    assert {n: set(c) for n, c in again_on.items()} == {n: set(c) for n, c in on.items()}


async def test_volumes_stay_with_their_app_where_the_other_engine_is_roomier(
    fleet: FleetAdapter, engines: dict[str, Any], fleet_owner: str
) -> None:
    handle = await fleet.create_volume(
        pr.VolumeRequest(volume_id="data", bundle_id="keeper", name="data")
    )
    home, _, _ = handle.handle.partition("/")
    web = pr.WorkloadPlan(
        name="web",
        image="pando.test/busybox:1",
        command=SLEEP,
        mounts=(pr.Mount(volume_id="data", path="/data"),),
    )
    plan = pr.BundlePlan(
        bundle_id="keeper",
        workloads=(web,),
        volumes=(pr.VolumePlan(volume_id="data", name="data"),),
        first_deploy=True,
    )
    assert (await fleet.apply(plan)).details["member"] == home
    await fleet.destroy(pr.BundleRef("keeper"))  # its volume kept
    # The other engine has far more room now; the app comes back where its data is.
    await fleet.members[home].apply(_plan("filler", memory=8 * GiB))  # its room goes
    assert await fleet.largest_fit_for("anything-new") == await fleet.members[
        "two" if home == "one" else "one"
    ].largest_fit_for("anything-new"), "the other engine is the roomier now"
    assert (await fleet.apply(plan)).details["member"] == home
    other = "two" if home == "one" else "one"
    assert "keeper" not in await _on_engine(engines[other], fleet_owner)


async def _two_apps(fleet: FleetAdapter) -> dict[str, str]:
    """One app on each engine: the member of each app's id."""
    homes: dict[str, str] = {}
    i = 0
    while set(homes.values()) != {"one", "two"}:
        bundle_id = f"app-{i}"
        homes[bundle_id] = (await fleet.apply(_plan(bundle_id))).details["member"]
        i += 1
    return homes


async def _eventually_unavailable(fleet: FleetAdapter, bundle_id: str) -> pr.AdapterUnavailable:
    with anyio.fail_after(60):
        while True:
            try:
                await fleet.observe(pr.BundleRef(bundle_id))
            except pr.AdapterUnavailable as error:
                return error
            await anyio.sleep(0.1)


async def _eventually_observed(fleet: FleetAdapter, bundle_id: str) -> pr.ObservedBundle:
    with anyio.fail_after(60):
        while True:
            with contextlib.suppress(pr.AdapterUnavailable):
                return await fleet.observe(pr.BundleRef(bundle_id))
            await anyio.sleep(0.1)


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_an_engine_stopped_or_killed_makes_its_apps_unavailable_never_placed_twice(
    fleet: FleetAdapter, engines: dict[str, Any], fleet_owner: str, how: str
) -> None:
    homes = await _two_apps(fleet)
    on_one = next(b for b, m in homes.items() if m == "one")
    on_two = next(b for b, m in homes.items() if m == "two")
    before = {name: await _on_engine(e, fleet_owner) for name, e in engines.items()}
    # In a worker thread: the loop keeps serving engine two meanwhile (28.5's dockerd takes 5 s
    # to exit while a client holds its event stream).
    await anyio.to_thread.run_sync(getattr(engines["one"], how))
    try:
        error = await _eventually_unavailable(fleet, on_one)
        assert error.details["member"] == "one"
        assert error.message.startswith("member one: ")
        assert (await fleet.observe(pr.BundleRef(on_two))).exists, "the other engine answers"
        # Found nowhere while an engine is silent: it may be there; not placed meanwhile.
        with pytest.raises(pr.AdapterUnavailable) as caught:
            await fleet.apply(_plan(on_one, first_deploy=False))
        assert caught.value.details["member"] == "one"
        with pytest.raises(pr.AdapterUnavailable):
            await fleet.observe(pr.BundleRef("never-made"))
        assert await _on_engine(engines["two"], fleet_owner) == before["two"]
    finally:
        await anyio.to_thread.run_sync(engines["one"].start)
    assert (await _eventually_observed(fleet, on_one)).exists
    for bundle_id, home in homes.items():
        assert (await fleet.apply(_plan(bundle_id))).details["member"] == home
    after = {name: await _on_engine(e, fleet_owner) for name, e in engines.items()}
    assert {n: set(c) for n, c in after.items()} == {n: set(c) for n, c in before.items()}
    assert all(count == 1 for c in after.values() for count in c.values()), "one container each"


async def _settled(engines: dict[str, Any], owner: str) -> None:
    """Wait until the engines' lists of ``owner``'s networks and containers stop changing."""

    async def listed() -> list[Counter[str]]:
        return [
            await _on_engine(e, owner, what) for e in engines.values() for what in ("ps", "network")
        ]

    before = await listed()
    with anyio.fail_after(30):
        while True:
            await anyio.sleep(0.5)
            now = await listed()
            if now == before:
                return
            before = now


KILLED_HOST = """
import sys, anyio, pando_runtime as pr
settings = {settings!r}

async def main() -> None:
    async with pr.load_adapter("fleet", settings) as fleet, anyio.create_task_group() as group:
        for i in range({apps}):
            web = pr.WorkloadPlan(name="web", image="pando.test/busybox:1", command={command!r},
                                  resources=pr.Resources(memory_bytes=64 * 1024**2))
            plan = pr.BundlePlan(bundle_id=f"crash-{{i}}", workloads=(web,), first_deploy=True)
            group.start_soon(fleet.apply, plan)

anyio.run(main)
"""


async def test_a_host_killed_mid_apply_and_restarted_puts_no_app_on_two_engines(
    engines: dict[str, Any], fleet_owner: str
) -> None:
    apps = 16
    settings = _fleet_settings(engines, fleet_owner)
    script = KILLED_HOST.format(settings=settings, apps=apps, command=SLEEP)
    process = await anyio.open_process([sys.executable, "-c", script])
    try:
        with anyio.fail_after(60):  # killed once some apps are made and others are not yet
            while True:
                listed = [await _on_engine(e, fleet_owner, "network") for e in engines.values()]
                if any(listed):
                    break
                await anyio.sleep(0.05)
        process.kill()
        await process.wait()
        # The daemons finish what the dead host had sent them (a request on its way is carried
        # out): a host restarted within that moment could miss a network still being made.
        await _settled(engines, fleet_owner)
        made = {name: await _on_engine(e, fleet_owner, "network") for name, e in engines.items()}
        done = [await _on_engine(e, fleet_owner) for e in engines.values()]
        assert sum(len(c) for c in done) < apps, "killed mid-apply: some apps have no container"
        async with FleetAdapter(settings) as restarted:
            for i in range(apps):
                await restarted.apply(_plan(f"crash-{i}"))
        networks = {
            name: await _on_engine(e, fleet_owner, "network") for name, e in engines.items()
        }
        containers = {name: await _on_engine(e, fleet_owner) for name, e in engines.items()}
        everywhere = Counter(b for n in networks.values() for b in n)
        assert everywhere == Counter({f"crash-{i}": 1 for i in range(apps)}), "one engine each"
        for name in engines:  # what the killed host made stayed where it was
            assert set(made[name]) <= set(networks[name])
            assert set(containers[name]) == set(networks[name])
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await _cleanup(engines, fleet_owner)


async def test_a_host_reaches_each_engines_apps_through_the_fleets_upstream(
    engines: dict[str, Any], host_namespace: Any, fleet_owner: str, tmp_path: Path
) -> None:
    """The host, in a namespace with no route to either engine's bridges, gets an answer from
    an app on each engine: the fleet's upstream is the member's, with its agent to dial."""
    from test_docker_agent import agent_settings, served, web  # noqa: PLC0415

    ca_file = tmp_path / "ca.pem"  # one authority for the fleet: the host trusts one
    members = {
        name: {
            "adapter": "docker",
            "settings": agent_settings(engine, fleet_owner, host_namespace.link(engine), ca_file),
        }
        for name, engine in engines.items()
    }
    try:
        async with FleetAdapter({"members": members}) as fleet:
            homes: dict[str, str] = {}
            i = 0
            while set(homes.values()) != {"one", "two"}:
                bundle_id = f"web-{i}"
                page = pr.BundlePlan(bundle_id=bundle_id, workloads=(web(bundle_id),))
                homes[bundle_id] = (await fleet.apply(page)).details["member"]
                i += 1
            for bundle_id, home in homes.items():
                upstream = fleet.upstream(pr.WorkloadRef(bundle_id, "web"), 8080)
                assert upstream.dial is not None, f"{home}: through its agent"
                answer = await served(host_namespace, upstream)
                assert bundle_id.encode() in answer, home
    finally:
        await _cleanup(engines, fleet_owner)


async def test_a_bundle_network_another_process_of_the_owner_made_is_kept(
    engines: dict[str, Any], fleet_owner: str
) -> None:
    """A network the view has not heard of (another process made it: the daemon's network
    events say nothing of whose it is) takes the name apply wants: it is the bundle's, kept."""
    from pando_runtime_docker import DockerAdapter  # noqa: PLC0415

    settings = _member(_host(engines["one"]), fleet_owner)["settings"]
    try:
        async with DockerAdapter(settings) as first, DockerAdapter(settings) as other:
            await other.apply(_plan("made-elsewhere"))
            handle = await first.apply(_plan("made-elsewhere"))
            assert handle.bundle_id == "made-elsewhere"
        networks = await _on_engine(engines["one"], fleet_owner, "network")
        assert networks == Counter({"made-elsewhere": 1})
    finally:
        await _cleanup({"one": engines["one"]}, fleet_owner)


async def test_a_sandboxed_app_goes_to_the_engine_with_gvisor_an_ordinary_one_by_room(
    engines: dict[str, Any], fleet_owner: str, gvisor_runtime: str
) -> None:
    """Engine two (runc alone) comes first, so it takes the ordinary app on a tie; the
    sandboxed one goes to engine one, whose adapter runs it under gVisor."""
    members = {
        "two": _member(_host(engines["two"]), fleet_owner),
        "one": _member(_host(engines["one"]), fleet_owner, sandbox_runtime=gvisor_runtime),
    }
    try:
        async with FleetAdapter({"members": members, "events_retry": [0.2]}) as fleet:
            assert (await fleet.capabilities()).isolation_class is pr.IsolationClass.SANDBOXED
            ordinary = await fleet.apply(_plan("ordinary"))
            sandboxed = pr.BundlePlan(
                bundle_id="sandboxed",
                workloads=_plan("sandboxed").workloads,
                isolation=pr.IsolationClass.SANDBOXED,
            )
            placed = await fleet.apply(sandboxed)
        assert (ordinary.details["member"], placed.details["member"]) == ("two", "one")
        assert await _on_engine(engines["one"], fleet_owner) == {"sandboxed": 1}
        name = f"{fleet_owner}.sandboxed.web"
        runtime = await anyio.to_thread.run_sync(
            lambda: engines["one"].docker("inspect", "--format", "{{.HostConfig.Runtime}}", name)
        )
        assert runtime.stdout.strip() == gvisor_runtime
    finally:
        await _cleanup(engines, fleet_owner)
