"""What Docker engines say host replicas wrote, held against the replicas' journals.

The replicas are ``replicahosts``' processes (``examples/replicas/replica_host.py``) over a
``fleet`` of engines. An engine's event stream names no client, so each replica runs its apps
from an image of its own (a tag of the same busybox image, ``pando.test/busybox:<replica>``):
a container's ``create`` and ``start`` events carry their image among their attributes, and
so name the replica that wrote them. (A new owner's apply therefore replaces the container: a
takeover is a write the events show.) A ``destroy`` names only what it removed: it is held to
"some replica owned the app then".

:class:`EventRecorder` follows each engine's stream from before the hosts start (an engine
keeps only its last 256 events for ``--since``); :func:`problems` and :func:`placed_twice`
read the recorded events; :func:`engine_state` is each app's containers as the engines list
them now.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from _docker_harness import BUSYBOX
from localconsul import ConsulAgent
from localstores import EtcdServer, PostgresServer
from replicahosts import SETTINGS, HostProcess, Journal

import pando_runtime as pr

__all__ = [
    "ROOM",
    "SMALL",
    "STORES",
    "Container",
    "EngineEvent",
    "EventRecorder",
    "FleetHosts",
    "Placed",
    "Stale",
    "StoreServer",
    "engine_state",
    "image_of",
    "mixed_epochs",
    "placed_twice",
    "problems",
]

ROOM, SMALL = 64 * 1024**3, 2 * 1024**3
"""Each engine's room for the apps (``capacity_memory_bytes``). The frozen replica counts
``SMALL`` on the second engine, the others on the first: they would place its apps elsewhere
but for its placement records (views of room diverge: a cache behind, a setting changed on
some replicas first)."""

REAPPLY = 3.0
"""Seconds between a replica's applies of every app it owns: what bounds a stale write's life."""

WRITES = ("create", "start", "destroy")
"""The container events that are writes (``die``, ``kill`` and ``stop`` follow from them)."""


EPOCH_LABEL = "io.pando.epoch"
"""The label holding the epoch a container was written under."""


def _epoch(label: str) -> int | None:
    return int(label) if label.isdigit() else None


def image_of(replica: str) -> str:
    """The image a replica runs its apps from: its name in the tag."""
    return f"{BUSYBOX.rsplit(':', 1)[0]}:{replica}"


def _writer(image: str) -> str | None:
    name, _, tag = image.rpartition(":")
    return tag if name == BUSYBOX.rsplit(":", 1)[0] and tag != BUSYBOX.rsplit(":", 1)[1] else None


@dataclass(frozen=True)
class EngineEvent:
    """One container event of an app, as an engine streamed it."""

    engine: str
    time: float
    action: str
    container: str
    app: str
    writer: str | None
    """The replica whose image the container runs (``None``: not a replica's)."""
    epoch: int | None
    """The write epoch the container was created under (its ``io.pando.epoch`` label)."""


class EventRecorder:
    """Each engine's container events of one owner, followed as a ``docker events`` process."""

    def __init__(self, engines: Mapping[str, Any], owner: str, folder: Path) -> None:
        self._engines = engines
        self._owner = owner
        self._folder = folder
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    @contextlib.contextmanager
    def running(self) -> Iterator[EventRecorder]:
        for name, engine in self._engines.items():
            with (self._folder / f"events-{name}.jsonl").open("wb") as out:
                argv = ["docker", "events", "--format", "{{json .}}", "--filter", "type=container"]
                argv += ["--filter", f"label=io.pando.owner={self._owner}"]
                self._processes[name] = subprocess.Popen(
                    argv,
                    stdout=out,
                    stderr=subprocess.DEVNULL,
                    env=engine.docker_env,
                )
        time.sleep(0.5)  # the CLI has subscribed before anything is written
        try:
            yield self
        finally:
            for process in self._processes.values():
                process.terminate()
                process.wait(timeout=10)

    def events(self) -> list[EngineEvent]:
        """Every write event so far of every engine, in the engines' time order."""
        found = []
        for name in self._engines:
            path = self._folder / f"events-{name}.jsonl"
            for line in path.read_text().splitlines():
                try:
                    raw = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if raw.get("Action") not in WRITES:
                    continue
                attributes = raw["Actor"]["Attributes"]
                found.append(
                    EngineEvent(
                        engine=name,
                        time=raw["timeNano"] / 1e9,
                        action=raw["Action"],
                        container=raw["Actor"]["ID"],
                        app=attributes.get("io.pando.bundle", ""),
                        writer=_writer(attributes.get("image", "")),
                        epoch=_epoch(attributes.get(EPOCH_LABEL, "")),
                    )
                )
        return sorted(found, key=lambda e: e.time)


@dataclass(frozen=True)
class Placed:
    """An app with containers on two engines at once."""

    app: str
    time: float
    engines: tuple[str, ...]


def placed_twice(events: Iterable[EngineEvent]) -> list[Placed]:
    """Each moment an app had containers on more than one engine (from creates and destroys)."""
    live: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    found = []
    for event in events:
        on = live[event.app][event.engine]
        if event.action == "create":
            on.add(event.container)
        elif event.action == "destroy":
            on.discard(event.container)
        engines = tuple(sorted(e for e, ids in live[event.app].items() if ids))
        if len(engines) > 1:
            found.append(Placed(event.app, event.time, engines))
    return found


@dataclass(frozen=True)
class Stale:
    """A write that contradicts "one writer at a time", described."""

    app: str
    writer: str | None
    time: float
    why: str


def problems(events: Iterable[EngineEvent], journals: Mapping[str, Journal]) -> list[Stale]:
    """Every write the engines saw that no ownership covers.

    A ``create`` or ``start`` must fall in one of its writer's tenures of the app; a
    ``destroy`` in some replica's. When the writer of an app changes from one write to the
    next, the later writer's tenure must have begun after the earlier write (the old owner
    wrote its last before the new one thought it owned the app).
    """
    found = []
    per_app: dict[str, list[EngineEvent]] = defaultdict(list)
    for event in events:
        if event.action == "destroy":
            if not any(j.tenure_of(event.app, event.time) for j in journals.values()):
                found.append(Stale(event.app, None, event.time, "destroyed while nobody owned it"))
            continue
        per_app[event.app].append(event)
        journal = journals.get(event.writer or "")
        if journal is None or journal.tenure_of(event.app, event.time) is None:
            why = f"{event.action} on {event.engine} outside its writer's ownership"
            found.append(Stale(event.app, event.writer, event.time, why))
    for app, writes in per_app.items():
        for before, after in itertools.pairwise(writes):
            later = journals.get(after.writer or "")
            if before.writer == after.writer or later is None:
                continue
            tenure = later.tenure_of(app, after.time)
            if tenure is not None and tenure[0] <= before.time:
                why = (
                    f"{after.action} at {after.time:.3f}, after {before.writer} wrote "
                    f"({before.action} at {before.time:.3f}) within its tenure from {tenure[0]:.3f}"
                )
                found.append(Stale(app, after.writer, after.time, why))
    return found


@dataclass(frozen=True)
class Container:
    """One of an app's containers as an engine lists it now."""

    engine: str
    writer: str
    state: str
    epoch: int | None


def engine_state(engines: Mapping[str, Any], owner: str) -> dict[str, list[Container]]:
    """Each app's containers as the engines list them now."""
    state: dict[str, list[Container]] = defaultdict(list)
    fmt = '{{.Label "io.pando.bundle"}} {{.Image}} {{.State}} {{.Label "' + EPOCH_LABEL + '"}}'
    for name, engine in engines.items():
        listed = engine.docker(
            "ps", "-a", "--filter", f"label=io.pando.owner={owner}", "--format", fmt
        ).stdout
        for line in listed.splitlines():
            app, image, status, *epoch = line.split()
            written = _epoch(epoch[0]) if epoch else None
            state[app].append(Container(name, _writer(image) or image, status, written))
    return dict(state)


def mixed_epochs(events: Iterable[EngineEvent], state: Mapping[str, list[Container]]) -> list[str]:
    """Each app whose containers now are not all of the newest epoch its containers were ever
    created under (an older epoch's container left standing, or one without the label)."""
    newest: dict[str, int] = {}
    for event in events:
        if event.action == "create" and event.epoch is not None:
            newest[event.app] = max(newest.get(event.app, 0), event.epoch)
    found = []
    for app, containers in sorted(state.items()):
        epochs = {c.epoch for c in containers}
        if None in epochs or epochs != {newest.get(app)}:
            had = sorted(str(e) for e in epochs)
            found.append(f"{app}: containers of epochs {had}, the newest created {newest.get(app)}")
    return found


STORES = ("postgres", "consul", "etcd")
"""The lease stores the replicas run over (each a distribution of its own)."""


class StoreServer:
    """A lease store's server of its own, on loopback: the replicas' store settings, reached
    directly or through a proxy, and the store frozen (SIGSTOP) with its sockets open."""

    def __init__(self, kind: str, timeout: float = 1.0) -> None:
        self.kind = kind
        self.timeout = timeout
        made: dict[str, Any] = {"postgres": PostgresServer, "consul": ConsulAgent}
        self._server: Any = made.get(kind, EtcdServer)()

    @property
    def upstream(self) -> str:
        """``127.0.0.1:<port>``: where the store answers (what a proxy forwards to)."""
        server = self._server
        if isinstance(server, PostgresServer):
            return f"127.0.0.1:{server.port}"
        if isinstance(server, ConsulAgent):
            return server.http_address.removeprefix("http://")
        return str(server.address).removeprefix("http://")

    def settings(self, prefix: str, through: str | None = None) -> dict[str, Any]:
        """The store's settings for replicas keeping their keys under ``prefix``, reaching it
        at ``through`` (``host:port`` of a proxy) or directly."""
        host, port = (through or self.upstream).rsplit(":", 1)
        if self.kind == "postgres":  # a server of its own: the table needs no prefix
            conninfo = f"host={host} port={port} dbname=postgres user=pando"
            return {"conninfo": conninfo, "timeout": self.timeout}
        return {"address": f"http://{host}:{port}", "prefix": prefix, "timeout": self.timeout}

    def freeze(self) -> None:
        """SIGSTOP the store's processes: it hangs, its sockets stay open."""
        if isinstance(self._server, ConsulAgent):  # one process
            self._server.component.pause()
        else:
            self._server.freeze()

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        if isinstance(self._server, ConsulAgent):
            self._server.component.resume()
        else:
            self._server.thaw()

    def __enter__(self) -> Self:
        self._server.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.thaw()
        if isinstance(self._server, ConsulAgent):
            # a dev agent of one test, its data thrown away: a `consul leave` would take 10 s
            self._server.component.kill()
        self._server.__exit__(exc_type, exc, tb)


class FleetHosts:
    """Replica processes over one fleet config, each running its apps from its own image."""

    def __init__(
        self,
        workdir: Path,
        engines: dict[str, Any],
        store: dict[str, Any],
        apps: int,
        reapply: float = REAPPLY,
    ) -> None:
        self.workdir = workdir
        self.engines = engines
        self.store = store
        self.reapply = reapply
        self.owner = f"rp{uuid.uuid4().hex[:8]}"
        self.apps = [f"{self.owner}-{n}" for n in range(apps)]
        self.running: dict[str, HostProcess] = {}
        self.gone: list[HostProcess] = []

    def config(
        self,
        name: str,
        hosts: dict[str, str],
        rooms: dict[str, int],
        store: dict[str, Any] | None = None,
        **more: Any,
    ) -> Path:
        """A replica's fleet settings: the engines at ``hosts``, the same store and owner,
        each engine's room (``capacity_memory_bytes``) from ``rooms``, and ``more`` of the
        members' settings."""
        member = {
            **more,
            "owner": self.owner,
            "stop_timeout": 1,
            "cache_max_staleness": 3.0,
            "cache_probe_interval": 0.5,
        }
        settings = {
            "members": {
                member_name: {
                    "adapter": "docker",
                    "settings": {
                        **member,
                        "host": host,
                        "capacity_memory_bytes": rooms.get(member_name, ROOM),
                    },
                }
                for member_name, host in hosts.items()
            },
            "events_retry": [0.2, 0.5, 1.0],
            "lease_store": store or self.store,
        }
        path = self.workdir / f"{name}.json"
        path.write_text(json.dumps(settings))
        return path

    def start(
        self,
        replica: str,
        hosts: dict[str, str] | None = None,
        rooms: dict[str, int] | None = None,
        store: dict[str, Any] | None = None,
        **more: Any,
    ) -> HostProcess:
        """Start a replica reaching the engines at ``hosts`` (default: their own sockets),
        counting ``rooms`` on them (default: ``ROOM`` each), ``more`` of its members'
        settings."""
        name = f"{self.owner}-{replica}"
        direct = {n: f"unix://{e.socket_path}" for n, e in self.engines.items()}
        config = self.config(name, hosts or direct, rooms or {}, store, **more)
        for engine in self.engines.values():
            engine.docker("tag", BUSYBOX, image_of(name))
        options = [
            "--adapter=fleet",
            f"--image={image_of(name)}",
            "--command=sleep 2147483647",
            f"--reapply={self.reapply}",
        ]
        host = HostProcess.start(self.workdir, config, name, len(self.apps), self.owner, options)
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
            if [(c.writer, c.state) for c in state.get(app, [])] != [(owners[app], "running")]:
                return False
        return all(
            h.journal().owned() == {a for a, o in owners.items() if o == name}
            for name, h in self.running.items()
        )

    def ensure_gone(self) -> None:
        for host in self.running.values():
            host.ensure_gone()
