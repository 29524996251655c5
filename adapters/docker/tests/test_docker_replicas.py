"""Three host replicas as processes over a fleet of two real engines and a real lease store.

Each replica is ``examples/replicas/replica_host.py`` (the library's public API only) running a
``fleet`` of the harness's two engines, its membership's leases and placement records in a
store of the test's own (``_docker_replicas.StoreServer``: PostgreSQL and etcd from Debian, the
project's Consul, each started in one to two seconds; it is frozen, which the session's must
never be). The store rules and each store's own faults are tested against every store in the
stores' modules; ``nox -s docker_replicas`` runs 300 apps and a kill over each store. The apps
here are few (``APPS``, ``CUT_APPS``): each costs a first placement and, at every change of
owner, a replacement (each replica runs its own image tag, ``_docker_replicas``), on a 2-core
CI machine.

The faults: over etcd, a replica frozen (SIGSTOP) in the middle of its first placements for
more than three lease durations, then thawed, and killed (SIGKILL) in the middle of taking its
apps back; over each store in turn, the store frozen (SIGSTOP of its processes) past the lease
duration, and a replica reaching the store through Toxiproxy cut from it or its answers lost
(``reset_peer``). After each, from the engines' own event streams: no app on two engines at
any moment, none lost, each app's containers its owner's and of the newest epoch its
containers were created under, and every write made inside its writer's tenure, but for the
rest of the frozen replica's applies in flight (a fleet cannot refuse them): those are named,
and repaired by the owner's next apply.

Figures (takeover after the kill, stale writes, apps per replica, wall time) are printed
(``-s``), never asserted.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _docker_harness import DockerHarness
from _docker_replicas import (
    ROOM,
    SMALL,
    STORES,
    EngineEvent,
    EventRecorder,
    FleetHosts,
    StoreServer,
    engine_state,
    image_of,
    mixed_epochs,
    placed_twice,
    problems,
)
from _socket_proxy import SocketProxy
from replicahosts import SETTINGS, HostProcess, Journal, until

pytestmark = pytest.mark.anyio

APPS = 60
"""Apps the three replicas share: about a minute of this machine's engines through the faults
(a first placement on the harness's engine takes about 0.28 s at four at a time)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the replicas are processes: the test's own loop hardly matters


@pytest.fixture
def engines(docker_engine: Any, second_docker_engine: Any) -> dict[str, Any]:
    return {"one": docker_engine, "two": second_docker_engine}


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Iterator[StoreServer]:
    """A store of the test's own (etcd unless the test names another): it is frozen, which
    the session's must never be."""
    with StoreServer(getattr(request, "param", "etcd")) as server:
        yield server


@pytest.fixture
async def proxies(engines: dict[str, Any]) -> AsyncIterator[dict[str, SocketProxy]]:
    """A proxy in front of each engine, which can hold a replica's writes in flight."""
    folder = Path(tempfile.mkdtemp(prefix="pdr", dir="/tmp"))  # socket paths are short
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


@pytest.fixture
async def make_hosts(
    tmp_path: Path, engines: dict[str, Any], store: StoreServer
) -> AsyncIterator[Callable[[int], FleetHosts]]:
    """``make_hosts(apps)``: the replicas of one test over the test's store; the processes
    killed and what they wrote removed after."""
    settings = store.settings(f"{tmp_path.name}/")
    made: list[FleetHosts] = []

    def make(apps: int) -> FleetHosts:
        made.append(FleetHosts(tmp_path, engines, {"kind": store.kind, "settings": settings}, apps))
        return made[-1]

    try:
        yield make
    finally:
        store.thaw()
        for hosts in made:
            hosts.ensure_gone()
            for engine in engines.values():
                await DockerHarness(f"unix://{engine.socket_path}").remove_owned(hosts.owner)
                for host in [*hosts.gone, *hosts.running.values()]:
                    engine.docker("rmi", image_of(host.name), check=False)


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[Any]:
    """A Toxiproxy server on loopback (its client) for the module's store faults."""
    from localcluster import ToxiproxyServer  # noqa: PLC0415 - the test harness

    with ToxiproxyServer() as server:
        yield server.client


def mid_apply(host: HostProcess, applied: int) -> bool:
    journal = host.journal()
    return len(journal.applied()) >= applied and bool(journal.in_flight())


def regaining(host: HostProcess, since: float) -> bool:
    """Whether ``host`` gained apps after ``since`` and is applying one of them now."""
    journal = host.journal()
    gained = [e["t"] for e in journal.of("gained") if e["t"] > since]
    if not gained:
        return False
    begun = {e["app"] for e in journal.of("apply") if e["t"] > gained[0]}
    return bool(journal.owned() and begun & journal.in_flight())


def check(events: list[EngineEvent], journals: dict[str, Journal], allowed: set[Any]) -> None:
    """No app on two engines at any moment; no write outside its writer's ownership but the
    ``allowed`` (writer, app) pairs."""
    twice = placed_twice(events)
    assert not twice, f"{len(twice)} times an app on two engines:\n" + "\n".join(
        f"{p.app} at {p.time:.3f} on {', '.join(p.engines)}" for p in twice[:30]
    )
    found = [p for p in problems(events, journals) if (p.writer, p.app) not in allowed]
    assert not found, f"{len(found)} writes outside ownership:\n" + "\n".join(
        f"{p.app} by {p.writer} at {p.time:.3f}: {p.why}" for p in found[:30]
    )


async def converged(hosts: FleetHosts) -> None:
    await until(hosts.converged, within=240)


def one_epoch_each(hosts: FleetHosts, events: list[EngineEvent]) -> None:
    """Converged, each app's containers are all of the newest epoch any of its containers was
    created under: what an older epoch wrote, late or not, is gone."""
    mixed = mixed_epochs(events, engine_state(hosts.engines, hosts.owner))
    assert not mixed, f"{len(mixed)} apps of mixed epochs:\n" + "\n".join(mixed[:30])


def _spread(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    median = ordered[len(ordered) // 2]
    return f"first {ordered[0]:.2f} s, median {median:.2f} s, last {ordered[-1]:.2f} s"


async def test_three_hosts_over_a_fleet_through_a_frozen_replica_then_killed(
    make_hosts: Callable[[int], FleetHosts],
    engines: dict[str, Any],
    proxies: dict[str, SocketProxy],
    store: StoreServer,
    tmp_path: Path,
) -> None:
    began = time.time()
    hosts = make_hosts(APPS)
    with EventRecorder(engines, hosts.owner, tmp_path).running() as recorder:
        # A replica frozen in the middle of its first placements for over three lease
        # durations: a proxy holds its first writes to the engines (each app's network), so
        # the freeze falls between its placement and its writes. The others place its apps
        # meanwhile, where its placement records say. Its writes are let through while it is
        # frozen; thawed, it goes on with each apply (its engines' answer timeout outlasts the
        # freeze, as a VM's pause can outlast a timeout): the rest lands after the takeover.
        for proxy in proxies.values():
            proxy.hold(b"/networks/create")
        through = {name: proxy.host for name, proxy in proxies.items()}
        frozen = hosts.start("c", through, {"one": ROOM, "two": SMALL}, answer_timeout=60.0)
        hosts.start("a", rooms={"one": SMALL, "two": ROOM})
        hosts.start("b", rooms={"one": SMALL, "two": ROOM})
        await until(lambda: sum(p.held for p in proxies.values()) > 0)
        frozen_at = frozen.freeze()
        in_flight = frozen.journal().in_flight()
        await anyio.sleep(3.5 * SETTINGS.lease_duration)
        for proxy in proxies.values():
            proxy.release()
        await anyio.sleep(0.5)  # the engines answer the frozen process
        thawed_at = frozen.thaw()
        allowed = {(frozen.name, app) for app in in_flight}

        # Thawed, it takes its apps back: killed (SIGKILL) in the middle of an apply of them.
        await until(lambda: regaining(frozen, since=thawed_at))
        check(recorder.events(), hosts.journals(), allowed)
        killed_at = hosts.kill(frozen)
        orphaned = frozen.journal().owned()
        assert orphaned, "the killed replica owned apps"
        await converged(hosts)
        journals = hosts.journals()
        events = recorder.events()
        check(events, journals, allowed)
        one_epoch_each(hosts, events)
        stale = [p for p in problems(events, journals) if (p.writer, p.app) in allowed]
        assert all(p.time > thawed_at for p in stale), "only after the thaw: the rest of its apply"
        taken = [
            min(t for j in journals.values() if (t := j.gained_at(app, after=killed_at)))
            for app in orphaned
        ]
        print(  # noqa: T201
            f"frozen replica: {len(in_flight)} applies in flight when frozen, thawed after "
            f"{thawed_at - frozen_at:.1f} s; {len(stale)} stale writes landed "
            f"({', '.join(sorted(p.app for p in stale)) or 'none'}), each repaired since; "
            f"killed: {len(orphaned)} apps taken over after SIGKILL: "
            f"{_spread([t - killed_at for t in taken])}"
        )

    per_replica = Counter(o for o in hosts.owners().values())
    print(  # noqa: T201
        f"apps per replica: {dict(per_replica)}; events: {len(recorder.events())}; "
        f"wall time: {time.time() - began:.1f} s"
    )


CUT_APPS = 12
"""Apps of the store faults: what they show is the replicas' letting go and taking back."""


@pytest.mark.parametrize("store", STORES, indirect=True)
async def test_three_hosts_let_go_while_their_store_is_frozen_and_take_their_apps_back(
    make_hosts: Callable[[int], FleetHosts],
    engines: dict[str, Any],
    store: StoreServer,
    tmp_path: Path,
) -> None:
    """The store frozen (SIGSTOP of its processes) past the lease duration: every replica stops
    owning, and once it thaws each owns its share again, with no write outside ownership."""
    hosts = make_hosts(CUT_APPS)
    with EventRecorder(engines, hosts.owner, tmp_path).running() as recorder:
        for replica in ("a", "b", "c"):
            hosts.start(replica)
        await converged(hosts)
        store.freeze()
        store_frozen_at = time.time()
        await anyio.sleep(2.5 * SETTINGS.lease_duration)
        store.thaw()
        # A bound that only catches a replica that never owns again (thawed, each owns its
        # share again within a few retry periods).
        await until(hosts.converged, within=15 * SETTINGS.lease_duration)
        journals = hosts.journals()
        one_epoch_each(hosts, recorder.events())
        lost = [
            j.lost_at(app, after=store_frozen_at) for j in journals.values() for app in j.owned()
        ]
        assert lost, "the replicas own apps"
        assert all(t is not None for t in lost), "every replica let go while the store was frozen"
        check(recorder.events(), journals, set())


async def _one_through_a_proxy(
    hosts: FleetHosts, store: StoreServer, toxiproxy: Any
) -> tuple[HostProcess, str]:
    """Start c reaching the store through a Toxiproxy proxy, a and b directly; wait until
    the apps are placed. The replica and its proxy's name."""
    proxy = toxiproxy.create(f"{store.kind}-{hosts.owner}", store.upstream)
    settings = store.settings(hosts.store["settings"].get("prefix", ""), through=proxy.listen)
    through = hosts.start("c", store={"kind": store.kind, "settings": settings})
    hosts.start("a")
    hosts.start("b")
    await converged(hosts)
    assert through.journal().owned(), "it owns apps"
    return through, proxy.name


async def _taken_over(hosts: FleetHosts, host: HostProcess, had: set[str], since: float) -> None:
    """``host`` let go of ``had``, and the others took each only after it did."""
    await until(lambda: not host.journal().owned())
    others = [h for h in hosts.running.values() if h is not host]
    await until(lambda: had <= set().union(*(h.journal().owned() for h in others)))
    let_go = host.journal()
    for app in had:
        lost = let_go.lost_at(app, after=since)
        taken = [t for h in others if (t := h.journal().gained_at(app, after=since))]
        assert lost is not None
        assert taken, f"{app} taken over"
        assert min(taken) > lost, f"{app}: taken only after {host.name} let go"


@contextlib.contextmanager
def _store_fault(toxiproxy: Any, proxy: str, fault: str) -> Iterator[None]:
    if fault == "cut":
        with toxiproxy.disabled(proxy):
            yield
    else:  # the store applies each call, and the connection is reset before the answer
        with toxiproxy.toxic(proxy, "reset_peer", stream="downstream", timeout=0):
            yield


@pytest.mark.parametrize("store", STORES, indirect=True)
@pytest.mark.parametrize("fault", ["cut", "answers_lost"])
async def test_a_replica_cut_from_its_store_lets_go_and_owns_again_when_healed(  # noqa: PLR0917 - fixtures
    make_hosts: Callable[[int], FleetHosts],
    engines: dict[str, Any],
    store: StoreServer,
    toxiproxy: Any,
    tmp_path: Path,
    fault: str,
) -> None:
    """c reaches the store through a Toxiproxy proxy: cut (nothing passes), or its answers
    lost (``reset_peer`` on their way: c cannot tell a renewal the store made from one lost).
    It lets go, the others take its apps only after it did, and healed it owns its share
    again, with no write outside its writer's ownership throughout."""
    hosts = make_hosts(CUT_APPS)
    with EventRecorder(engines, hosts.owner, tmp_path).running() as recorder:
        faulty, proxy = await _one_through_a_proxy(hosts, store, toxiproxy)
        had, since = faulty.journal().owned(), time.time()
        with _store_fault(toxiproxy, proxy, fault):
            await _taken_over(hosts, faulty, had, since)
            check(recorder.events(), hosts.journals(), set())
        # A bound that only catches a replica that never owns again (healed, it owns again
        # within a few retry periods, and replaces its few apps in seconds).
        await until(hosts.converged, within=15 * SETTINGS.lease_duration)
        check(recorder.events(), hosts.journals(), set())
        one_epoch_each(hosts, recorder.events())
