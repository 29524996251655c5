"""Three host replicas as processes over a fleet of two real engines and a real lease store.

Each replica is ``examples/replicas/replica_host.py`` (the library's public API only) running a
``fleet`` of the harness's two engines, its membership's leases and placement records in an
etcd of the test's own (Debian's etcd 3.4: a process of its own, no build, started in about a
second; the other stores keep the same rules, tested in their own modules, and run through the
same faults at 300 apps in ``nox -s docker_replicas``). The apps are few (see
``APPS``): each costs a first placement and, at every ownership change, a replacement (each
replica runs its own image tag, below), on a 2-core CI machine.

Faults, in turn, on one set of apps: a replica killed (SIGKILL) in the middle of the first
rollout; a replica that joined frozen (SIGSTOP) in the middle of an apply for more than three
lease durations, then thawed; the store frozen (SIGSTOP of etcd) past the lease duration, then
thawed. After each, from the engines' own event streams (``_docker_replicas``): no app on two
engines at any moment, none lost, each app's containers one writer's (its owner's), and every
write made inside its writer's tenure, but for the rest of the frozen replica's applies in
flight, which a fleet cannot refuse: those are named, and shown repaired by the owner's next
apply (``--reapply``).

Figures (takeover after the kill, stale writes and how long they lived, apps per replica,
wall time) are printed (``-s``), never asserted.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_replicas import (
    EngineEvent,
    EventRecorder,
    engine_state,
    image_of,
    placed_twice,
    problems,
)
from localstores import EtcdServer
from replicahosts import SETTINGS, HostProcess, Journal, until

import pando_runtime as pr

pytestmark = pytest.mark.anyio

APPS = 36
"""Apps the three replicas share: about a minute of this machine's engines through the faults
(a first placement on the harness's engine takes about 0.28 s at four at a time)."""

REAPPLY = 3.0
"""Seconds between a replica's applies of every app it owns: what bounds a stale write's life."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the replicas are processes: the test's own loop hardly matters


class FleetHosts:
    """Replica processes over one fleet config, each running its apps from its own image."""

    def __init__(self, workdir: Path, engines: dict[str, Any], store: str, apps: int) -> None:
        self.workdir = workdir
        self.engines = engines
        self.owner = f"rp{uuid.uuid4().hex[:8]}"
        self.apps = [f"{self.owner}-{n}" for n in range(apps)]
        settings = {
            "members": {
                name: {
                    "adapter": "docker",
                    "settings": {
                        "host": f"unix://{engine.socket_path}",
                        "owner": self.owner,
                        "stop_timeout": 1,
                        "cache_max_staleness": 3.0,
                        "cache_probe_interval": 0.5,
                    },
                }
                for name, engine in engines.items()
            },
            "events_retry": [0.2, 0.5, 1.0],
            "lease_store": {
                "kind": "etcd",
                "settings": {"address": store, "prefix": f"{self.owner}/", "timeout": 1.0},
            },
        }
        self.config = workdir / "fleet.json"
        self.config.write_text(json.dumps(settings))
        self.running: dict[str, HostProcess] = {}
        self.gone: list[HostProcess] = []

    def start(self, replica: str) -> HostProcess:
        name = f"{self.owner}-{replica}"
        for engine in self.engines.values():
            engine.docker("tag", BUSYBOX, image_of(name))
        more = [
            "--adapter=fleet",
            f"--image={image_of(name)}",
            "--command=sleep 2147483647",
            f"--reapply={REAPPLY}",
        ]
        host = HostProcess.start(self.workdir, self.config, name, len(self.apps), self.owner, more)
        # An engine stamps an event when the call ends: a start sent just before a SIGKILL
        # was seen ending 0.9 s after it. A write ending later than this, and after another
        # replica's takeover, is still caught (the writer changed after the takeover began).
        host.kill_grace = SETTINGS.lease_duration
        self.running[name] = host
        return host

    def kill(self, host: HostProcess) -> float:
        del self.running[host.name]
        self.gone.append(host)
        return host.kill()

    def journals(self) -> dict[str, Journal]:
        return {h.name: h.journal() for h in [*self.gone, *self.running.values()]}

    def owners(self) -> dict[str, str | None]:
        return {app: pr.rendezvous_owner(app, list(self.running)) for app in self.apps}

    def converged(self) -> bool:
        """Each app one running container, on one engine, written by its owner now; each
        running replica owning exactly its share."""
        state = engine_state(self.engines, self.owner)
        owners = self.owners()
        for app in self.apps:
            if [(w, s) for _, w, s in state.get(app, [])] != [(owners[app], "running")]:
                return False
        return all(
            h.journal().owned() == {a for a, o in owners.items() if o == name}
            for name, h in self.running.items()
        )

    def ensure_gone(self) -> None:
        for host in self.running.values():
            host.ensure_gone()


@pytest.fixture
def engines(docker_engine: Any, second_docker_engine: Any) -> dict[str, Any]:
    return {"one": docker_engine, "two": second_docker_engine}


@pytest.fixture
def store() -> Iterator[EtcdServer]:
    """An etcd of the test's own: it is frozen, which the session's must never be."""
    with EtcdServer() as server:
        yield server


@pytest.fixture
async def hosts(
    tmp_path: Path, engines: dict[str, Any], store: EtcdServer
) -> AsyncIterator[FleetHosts]:
    made = FleetHosts(tmp_path, engines, store.address, APPS)
    try:
        yield made
    finally:
        made.ensure_gone()
        store.thaw()
        for engine in engines.values():
            await DockerHarness(f"unix://{engine.socket_path}").remove_owned(made.owner)
            for host in [*made.gone, *made.running.values()]:
                engine.docker("rmi", image_of(host.name), check=False)


def mid_apply(host: HostProcess, applied: int) -> bool:
    journal = host.journal()
    return len(journal.applied()) >= applied and bool(journal.in_flight())


def check(events: list[EngineEvent], journals: dict[str, Journal], allowed: set[Any]) -> None:
    """No app on two engines at any moment; no write outside its writer's ownership but the
    ``allowed`` (writer, app) pairs."""
    assert placed_twice(events) == [], "an app on two engines"
    found = [p for p in problems(events, journals) if (p.writer, p.app) not in allowed]
    assert not found, f"{len(found)} writes outside ownership:\n" + "\n".join(
        f"{p.app} by {p.writer} at {p.time:.3f}: {p.why}" for p in found[:30]
    )


async def converged(hosts: FleetHosts) -> None:
    await until(hosts.converged, within=240)


def _spread(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    median = ordered[len(ordered) // 2]
    return f"first {ordered[0]:.2f} s, median {median:.2f} s, last {ordered[-1]:.2f} s"


async def test_three_hosts_over_a_fleet_through_a_kill_a_frozen_replica_and_a_frozen_store(
    hosts: FleetHosts, engines: dict[str, Any], store: EtcdServer, tmp_path: Path
) -> None:
    began = time.time()
    with EventRecorder(engines, hosts.owner, tmp_path).running() as recorder:
        # A replica killed in the middle of the first rollout.
        for replica in ("a", "b", "c"):
            hosts.start(replica)
        victim = hosts.running[f"{hosts.owner}-b"]
        await until(lambda: mid_apply(victim, 3))
        killed_at = hosts.kill(victim)
        orphaned = victim.journal().owned()
        assert orphaned, "the killed replica owned apps"
        await converged(hosts)
        journals = hosts.journals()
        check(recorder.events(), journals, set())
        taken = [
            min(t for j in journals.values() if (t := j.gained_at(app, after=killed_at)))
            for app in orphaned
        ]
        after_kill = _spread([t - killed_at for t in taken])
        print(f"kill: {len(orphaned)} apps taken over after SIGKILL: {after_kill}")  # noqa: T201

        # A replica that joined, frozen mid-apply for more than three lease durations.
        joined = hosts.start("d")
        await until(lambda: mid_apply(joined, 2))
        frozen_at = joined.freeze()
        in_flight = joined.journal().in_flight()
        await anyio.sleep(3.5 * SETTINGS.lease_duration)
        thawed_at = joined.thaw()
        await converged(hosts)
        allowed = {(joined.name, app) for app in in_flight}
        events = recorder.events()
        check(events, hosts.journals(), allowed)
        stale = [p for p in problems(events, hosts.journals()) if (p.writer, p.app) in allowed]
        assert all(p.time > thawed_at for p in stale), "only after the thaw: the rest of its apply"
        print(  # noqa: T201
            f"frozen replica: {len(in_flight)} applies in flight when frozen ({frozen_at:.1f}), "
            f"thawed after {thawed_at - frozen_at:.1f} s; {len(stale)} stale writes landed, "
            "each repaired by the owner's next apply"
        )

        # The store frozen past the lease duration: every replica stops owning, then resumes.
        store.freeze()
        store_frozen_at = time.time()
        await anyio.sleep(2.5 * SETTINGS.lease_duration)
        store.thaw()
        await converged(hosts)
        journals = hosts.journals()
        lost = [
            j.lost_at(app, after=store_frozen_at)
            for j in journals.values()
            for app in j.owned()
            if j.replica in hosts.running
        ]
        assert all(t is not None for t in lost), "every replica let go while the store was frozen"
        check(recorder.events(), journals, allowed)

    per_replica = Counter(o for o in hosts.owners().values())
    print(  # noqa: T201
        f"apps per replica: {dict(per_replica)}; events: {len(recorder.events())}; "
        f"wall time: {time.time() - began:.1f} s"
    )
