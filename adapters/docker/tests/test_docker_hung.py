"""An engine that hangs: dockerd frozen (SIGSTOP) with its socket and connections open, or a
remote engine (TLS or SSH) behind a link that drops every packet (iptables in its namespace).

Unlike a stopped or killed daemon (connections refused at once), a frozen one answers nothing
and closes nothing, as a deadlocked daemon, a stalled machine or a partition that drops
packets. The adapter must find it out by itself: its view refused past its bound, its calls
cut short, a fleet's new apps placed elsewhere; and all of it undone once the daemon answers
again (SIGCONT). How fast is measured in ``benchmarks/hung_member.py``, not asserted here.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from _docker_harness import DockerHarness
from _docker_tests import adapter_config, ssh_settings, tls_settings, workload
from _socket_proxy import SocketProxy
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr
from pando_runtime.fleet import FleetAdapter

GUARD = 60.0
"""Seconds any wait here may take before the test fails as hung (never a measure of speed)."""

FAST = {"cache_max_staleness": 2.0, "cache_probe_interval": 0.5, "answer_timeout": 0.5}
"""Short bounds, so that the test waits seconds, not the defaults' half minute."""

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The cut calls and the dropped stream are anyio's cancel scopes, alike on trio."""
    return "asyncio"


def _host(engine: Any) -> str:
    return f"unix://{engine.socket_path}"


async def _refused(call: Any) -> pr.AdapterUnavailable:
    """The ``AdapterUnavailable`` the awaitable ``call`` raises (it must raise it)."""
    with pytest.raises(pr.AdapterUnavailable) as raised:
        await call
    return raised.value


async def _stale(adapter: pr.RuntimeAdapter, bundle_id: str) -> pr.AdapterUnavailable:
    """Observe until it refuses; the refusal."""
    with anyio.fail_after(GUARD):
        while True:
            try:
                await adapter.observe(pr.BundleRef(bundle_id))
            except pr.AdapterUnavailable as error:
                return error
            await anyio.sleep(0.1)


async def _running_again(adapter: pr.RuntimeAdapter, bundle_id: str) -> pr.ObservedBundle:
    with anyio.fail_after(GUARD):
        while True:
            try:
                observed = await adapter.observe(pr.BundleRef(bundle_id))
            except pr.AdapterUnavailable:
                observed = None
            if observed is not None and observed.workloads and observed.workloads[0].running:
                return observed
            await anyio.sleep(0.1)


async def test_a_frozen_engine_is_refused_within_the_bound_and_found_again(
    docker_engine: Any, owner: str
) -> None:
    plan = pr.BundlePlan(bundle_id="hung-app", workloads=(workload("web"),))
    settings = adapter_config(_host(docker_engine), owner, **FAST)
    async with DockerAdapter(settings) as adapter:
        try:
            await adapter.apply(plan)
            await _running_again(adapter, plan.bundle_id)
            events: list[pr.BundleEvent] = []
            ended: list[BaseException] = []

            async def follow() -> None:
                try:
                    async with adapter.watch_bundles() as stream:
                        async for event in stream:
                            events.append(event)  # noqa: PERF401 - kept as it ends
                except pr.AdapterUnavailable as error:
                    ended.append(error)

            async with anyio.create_task_group() as group:
                group.start_soon(follow)
                with docker_engine.frozen():
                    # A call in flight when the daemon hangs is cut short, not left to 60 s.
                    in_flight = await _refused(adapter.in_use())
                    assert in_flight.details["cause"] == "not_answering"
                    assert "does not answer" in in_flight.message
                    assert "cannot be reached" not in in_flight.message
                    stale = await _stale(adapter, plan.bundle_id)
                    # The watch ended with the error: the host resyncs.
                    with anyio.fail_after(GUARD):
                        while not ended:  # noqa: ASYNC110 - the watch's own end
                            await anyio.sleep(0.05)
                    again = await _refused(adapter.apply(plan))  # nothing to write is no success
                    room = await _refused(adapter.largest_fit_for("another-app"))
                    asked = await _refused(
                        adapter.observe(pr.BundleRef(plan.bundle_id), not_before=datetime.now(UTC))
                    )
            assert stale.details["host"] == _host(docker_engine)
            assert stale.details["cause"] == "not_answering"
            assert stale.details["stale_for"] >= FAST["cache_max_staleness"]
            assert datetime.fromisoformat(stale.details["confirmed_at"]) < datetime.now(UTC)
            assert docker_engine.socket_path.name in stale.message
            assert isinstance(ended[0], pr.AdapterUnavailable)
            assert events[0].kind == pr.BundleEventKind.WATCHING
            for refusal in (again, room, asked):
                assert "does not answer" in refusal.message, refusal.message
            # Thawed: the dropped stream is opened again, the app found running, writes work.
            thawed = datetime.now(UTC)
            observed = await _running_again(adapter, plan.bundle_id)
            assert observed.confirmed_at is not None
            assert observed.confirmed_at >= thawed
            writes = adapter.stats.writes
            await adapter.apply(plan)
            assert adapter.stats.writes == writes  # the app ran on: nothing to redo
        finally:
            await DockerHarness(_host(docker_engine)).remove_owned(owner)


def _dropping(engine: Any, port: int, action: str) -> None:
    """Insert (``-I``) or delete (``-D``) the rules that drop every packet to and from ``port``
    in the engine's namespace: its connections stay open, nothing gets through either way."""
    for chain, match in (("INPUT", "--dport"), ("OUTPUT", "--sport")):
        place = ["1"] if action == "-I" else []
        rule = ["-p", "tcp", match, str(port), "-j", "DROP"]
        done = engine.run_in_netns(["iptables", "-w", action, chain, *place, *rule])
        assert done.returncode == 0, done.stderr


@pytest.fixture(params=["tls", "ssh"])
def remote(request: pytest.FixtureRequest, engine: Any) -> tuple[dict[str, Any], int, str]:
    """The engine reached as a remote one: over TLS (``tcp://``) or SSH (``ssh://``, the
    engine's socket through sshd), each through a proxy on the host's loopback. Its settings,
    the port in the engine's namespace whose packets a partition drops, and the host an error
    names."""
    if request.param == "tls":
        proxy: SocketProxy = request.getfixturevalue("tls_proxy")
        return tls_settings(engine, proxy), engine.tls.port, proxy.host
    sshd = request.getfixturevalue("engine_sshd")
    proxy = request.getfixturevalue("ssh_proxy")
    settings = ssh_settings(engine, sshd, proxy)
    return settings, sshd.port, settings["host"]


async def test_a_remote_engine_behind_a_link_that_drops_packets_is_refused_and_found_again(
    engine: Any, remote: tuple[dict[str, Any], int, str], owner: str
) -> None:
    """The remote engine's port dropping every packet, as a partition: its connections (the
    TLS socket; the SSH session and the channels in it) stay open and nothing answers."""
    reached, port, host = remote
    plan = pr.BundlePlan(bundle_id="cut-off-app", workloads=(workload("web"),))
    settings = adapter_config(**reached, owner=owner, **FAST)
    async with DockerAdapter(settings) as adapter:
        try:
            await adapter.apply(plan)
            await _running_again(adapter, plan.bundle_id)
            _dropping(engine, port, "-I")
            try:
                stale = await _stale(adapter, plan.bundle_id)
                again = await _refused(adapter.apply(plan))
            finally:
                _dropping(engine, port, "-D")
            assert stale.details["cause"] == "not_answering"
            assert stale.details["host"] == host
            assert "does not answer" in again.message
            healed = datetime.now(UTC)
            observed = await _running_again(adapter, plan.bundle_id)  # the stream was reopened
            assert observed.confirmed_at is not None
            assert observed.confirmed_at >= healed
        finally:
            await DockerHarness(_host(engine)).remove_owned(owner)


# -- a fleet of two, one frozen ---------------------------------------------------------------


@pytest.fixture
def engines(docker_engine: Any, second_docker_engine: Any) -> dict[str, Any]:
    return {"one": docker_engine, "two": second_docker_engine}


@pytest.fixture
async def fleet(engines: dict[str, Any], owner: str) -> AsyncIterator[FleetAdapter]:
    members = {
        name: {"adapter": "docker", "settings": adapter_config(_host(e), owner, **FAST)}
        for name, e in engines.items()
    }
    settings = {"members": members, "events_retry": [0.2, 0.5], "answer_deadline": 2.0}
    try:
        async with FleetAdapter(settings) as made:
            yield made
    finally:
        for engine in engines.values():
            await DockerHarness(_host(engine)).remove_owned(owner)


async def _bundles_on(engine: Any, owner: str) -> Counter[str]:
    label = f"label=io.pando.owner={owner}"
    fmt = '{{.Label "io.pando.bundle"}}'
    out = await anyio.to_thread.run_sync(
        lambda: engine.docker("ps", "-a", "--filter", label, "--format", fmt)
    )
    return Counter(line for line in out.stdout.split() if line)


def _app(name: str, *, first_deploy: bool = True) -> pr.BundlePlan:
    limits = pr.Resources(cpu_millis=250, memory_bytes=64 * 1024**2)
    return pr.BundlePlan(
        bundle_id=f"{name}-{uuid.uuid4().hex[:6]}",
        workloads=(workload("web", resources=limits),),
        first_deploy=first_deploy,
    )


async def test_a_fleet_places_around_a_frozen_member_and_keeps_one_copy(
    fleet: FleetAdapter, engines: dict[str, Any], owner: str
) -> None:
    frozen_app, other_app = _app("frozen"), _app("other")
    await fleet.apply(frozen_app)
    frozen_name = await fleet.locate(frozen_app.bundle_id)
    await fleet.apply(other_app)  # the room frozen_app holds sends it to the other engine
    other_name = await fleet.locate(other_app.bundle_id)
    assert {frozen_name, other_name} == set(engines)
    for plan in (frozen_app, other_app):
        await _running_again(fleet, plan.bundle_id)

    with engines[str(frozen_name)].frozen():
        stale = await _stale(fleet, frozen_app.bundle_id)
        assert stale.details["member"] == frozen_name
        observed = await fleet.observe(pr.BundleRef(other_app.bundle_id))  # unaffected
        assert observed.workloads[0].running
        first = _app("first")
        await fleet.apply(first)
        assert await fleet.locate(first.bundle_id) == other_name
        unknown = _app("unknown", first_deploy=False)  # it may be on the frozen member
        refused = await _refused(fleet.apply(unknown))
        assert refused.details["member"] == frozen_name

    await _running_again(fleet, frozen_app.bundle_id)
    on_frozen = await _bundles_on(engines[str(frozen_name)], owner)
    on_other = await _bundles_on(engines[str(other_name)], owner)
    assert set(on_frozen) == {frozen_app.bundle_id}
    assert set(on_other) == {other_app.bundle_id, first.bundle_id}
    assert all(n == 1 for n in (*on_frozen.values(), *on_other.values()))
