"""Benchmark: Engine API calls and seconds per operation with many apps on a real Docker Engine.

    python adapters/docker/benchmarks/docker_apps.py [--apps 10,100,500] [--host URL]

Without ``--host`` it starts the tests' engine (tests/support/localdocker: Debian's dockerd
20.10 in network namespaces of its own; needs root and ``docker.io``). For each number of apps
(one small busybox container each, on its bundle's own network) a fresh adapter of its own
owner prints:

- first apply, re-apply and observe of every app: the adapter's calls (its transport's counter,
  by route) per app and the seconds of the whole pass, beside the naive way of observing (what
  a stateless adapter does: a container list filtered by the bundle's label, then one inspect
  per container) over the same apps on the same engine;
- apply to running: from an app's apply call to its ``started`` event at the host, p50 / p99;
- events' latency: a container killed from outside (``POST /containers/{id}/kill``), from its
  exit (the daemon's ``State.FinishedAt``) and from the kill request to the host's ``exited``
  event, p50 / p99;
- destroy of every app: calls per app and seconds.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
from pando_runtime_docker import DockerAdapter

from pando_runtime import (
    BundleEvent,
    BundleEventKind,
    BundlePlan,
    BundleRef,
    Resources,
    WorkloadPlan,
)

ROOT = Path(__file__).resolve().parents[3]
COMMAND = ("sleep", "2147483647")
"""PID 1 of every app: sleeps, costs nothing, dies on SIGKILL (the events' sample)."""
IN_FLIGHT = 1
"""Applies and destroys at once by default: one adapter's concurrent first applies race for
their networks' subnets (each lists ``/networks`` and carves the first free one), and more than
a few at once exhaust its retries; ``--in-flight`` sets it."""
EXITS = 20
"""Containers killed for the events' latency."""
API = "1.41"


def plan(i: int, image: str, cpu_millis: int) -> BundlePlan:
    """App ``i``: one small container (``cpu_millis`` 0: no CPU limit)."""
    return BundlePlan(
        bundle_id=f"app-{i}",
        workloads=(
            WorkloadPlan(
                name="main",
                image=image,
                command=COMMAND,
                env={"INDEX": str(i)},
                resources=Resources(cpu_millis=cpu_millis or None, memory_bytes=16 * 1024**2),
            ),
        ),
    )


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def ms(values: list[float]) -> str:
    """p50 / p99 / max in milliseconds."""
    return (
        f"p50 {pct(values, 0.5) * 1000:7.1f} ms  p99 {pct(values, 0.99) * 1000:7.1f} ms  "
        f"max {max(values) * 1000:7.1f} ms  (n={len(values)})"
    )


class Calls:
    """The adapter's calls during a block, by route."""

    def __init__(self, adapter: DockerAdapter) -> None:
        self.adapter = adapter
        self.by_kind: Counter[str] = Counter()
        self.seconds = 0.0

    @contextmanager
    def counting(self) -> Iterator[None]:
        before = Counter(self.adapter.stats.calls_by_kind)
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds = time.monotonic() - started
            self.by_kind = Counter(self.adapter.stats.calls_by_kind) - before

    def line(self, what: str, apps: int) -> str:
        total = sum(self.by_kind.values())
        routes = ", ".join(f"{k} {n / apps:.2f}" for k, n in sorted(self.by_kind.items()))
        return (
            f"  {what:26} {total / apps:6.2f} calls/app  {self.seconds:8.2f} s "
            f"({self.seconds / apps * 1000:7.1f} ms/app)  {routes or '-'}"
        )


async def in_pool(jobs: list[Callable[[], Awaitable[None]]], in_flight: int) -> None:
    """Run ``jobs`` with at most ``in_flight`` at once."""
    limit = anyio.Semaphore(in_flight)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with limit:
            await job()

    async with anyio.create_task_group() as group:
        for job in jobs:
            group.start_soon(one, job)


class Recorder:
    """The host's end of the adapter's events: when each bundle's first start and exit came."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.exited: dict[str, float] = {}
        self.missed = 0

    async def run(
        self,
        adapter: DockerAdapter,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with adapter.watch_bundles() as events:
            await anext(events)  # WATCHING
            task_status.started()
            async for event in events:
                self.note(event)

    def note(self, event: BundleEvent) -> None:
        now = time.time()
        if event.kind is BundleEventKind.MISSED:
            self.missed += 1
        elif event.bundle_id is None:
            return
        elif event.kind is BundleEventKind.STARTED:
            self.started.setdefault(event.bundle_id, now)
        elif event.kind is BundleEventKind.EXITED:
            self.exited.setdefault(event.bundle_id, now)


class NaiveObserver:
    """Observe as a stateless adapter does: list the bundle's containers, inspect each."""

    def __init__(self, host: str, owner: str) -> None:
        socket = host.removeprefix("unix://") if host.startswith("unix://") else None
        base = "http://docker" if socket else "http://" + host.split("://", 1)[1]
        self.client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=socket), base_url=f"{base}/v{API}"
        )
        self.owner = owner
        self.owner_label = f"io.pando.owner={owner}"
        self.calls = 0

    async def observe(self, bundle_id: str) -> list[dict[str, Any]]:
        labels = [self.owner_label, f"io.pando.bundle={bundle_id}"]
        listed = await self.client.get(
            "/containers/json", params={"all": "1", "filters": json.dumps({"label": labels})}
        )
        self.calls += 1
        states = []
        for summary in listed.json():
            inspected = await self.client.get(f"/containers/{summary['Id']}/json")
            self.calls += 1
            states.append(inspected.json()["State"])
        return states

    async def kill(self, name: str) -> float:
        """SIGKILL a container; the wall-clock time the request was sent."""
        sent = time.time()
        (await self.client.post(f"/containers/{name}/kill")).raise_for_status()
        return sent

    async def finished_at(self, name: str) -> float:
        """The daemon's ``State.FinishedAt`` of a container, as a Unix time."""
        text = (await self.client.get(f"/containers/{name}/json")).json()["State"]["FinishedAt"]
        stamp, _, fraction = text.rstrip("Z").partition(".")
        moment = datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()
        return moment + float(f"0.{fraction or '0'}")


async def measure(host: str, image: str, apps: int, in_flight: int, cpu_millis: int) -> None:
    """Every figure for ``apps`` apps, with an adapter of a fresh owner."""
    owner = f"bench{uuid.uuid4().hex[:6]}"
    config = {"host": host, "owner": owner, "stop_timeout": 1, "subnet_prefix": 28}
    plans = [plan(i, image, cpu_millis) for i in range(apps)]
    naive = NaiveObserver(host, owner)
    recorder = Recorder()
    print(
        f"{apps} apps (one container and one network each; {in_flight} in flight; "
        f"CPU limit {f'{cpu_millis}m' if cpu_millis else 'none'}), {owner}:"
    )
    async with DockerAdapter(config) as adapter, anyio.create_task_group() as group:
        await group.start(recorder.run, adapter)
        await apply_and_observe(adapter, plans, in_flight, recorder, naive)
        await exit_latency(adapter, plans[: min(EXITS, apps)], recorder, naive)
        calls = Calls(adapter)
        with calls.counting():
            await in_pool([destroy_job(adapter, p) for p in plans], in_flight)
        print(calls.line("destroy", apps))
        print(f"  events missed (MISSED) during the run: {recorder.missed}")
        group.cancel_scope.cancel()
    await naive.client.aclose()


async def apply_and_observe(
    adapter: DockerAdapter,
    plans: list[BundlePlan],
    in_flight: int,
    recorder: Recorder,
    naive: NaiveObserver,
) -> None:
    """First apply, apply to running, re-apply, observe beside the naive observe."""
    apps = len(plans)
    calls = Calls(adapter)
    applied: dict[str, float] = {}

    def apply_job(p: BundlePlan) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            applied[p.bundle_id] = time.time()
            await adapter.apply(p)

        return job

    with calls.counting():
        await in_pool([apply_job(p) for p in plans], in_flight)
    print(calls.line("first apply", apps))
    with anyio.fail_after(120):
        while len(recorder.started) < apps:  # noqa: ASYNC110 - polls the host's events
            await anyio.sleep(0.05)
    to_running = [recorder.started[b] - applied[b] for b in applied]
    with calls.counting():
        for p in plans:
            await adapter.apply(p)
    print(calls.line("re-apply (sequential)", apps))
    with calls.counting():
        running = [(await adapter.observe(BundleRef(p.bundle_id))).all_running for p in plans]
    print(calls.line("observe (adapter)", apps) + f"  all running: {all(running)}")
    naive.calls = 0
    started = time.monotonic()
    states = [await naive.observe(p.bundle_id) for p in plans]
    seconds = time.monotonic() - started
    print(
        f"  {'observe (naive)':26} {naive.calls / apps:6.2f} calls/app  {seconds:8.2f} s "
        f"({seconds / apps * 1000:7.1f} ms/app)  list + inspect per container; all running: "
        f"{all(s and s[0]['Running'] for s in states)}"
    )
    print(f"  apply to running           {ms(to_running)}")


class DaemonDies:
    """A raw reader of the daemon's ``die`` events (beside the adapter's own stream): when the
    daemon stamped each and when it arrived, by container name."""

    def __init__(self, naive: NaiveObserver) -> None:
        self.naive = naive
        self.seen: dict[str, tuple[float, float]] = {}

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        filters = {"type": ["container"], "event": ["die"], "label": [self.naive.owner_label]}
        params = {"filters": json.dumps(filters)}
        timeout = httpx.Timeout(None, connect=5)
        async with self.naive.client.stream(
            "GET", "/events", params=params, timeout=timeout
        ) as events:
            task_status.started()
            async for line in events.aiter_lines():
                if line.strip():
                    event = json.loads(line)
                    name = event["Actor"]["Attributes"]["name"]
                    self.seen[name] = (event["timeNano"] / 1e9, time.time())


async def exit_latency(
    adapter: DockerAdapter, sample: list[BundlePlan], recorder: Recorder, naive: NaiveObserver
) -> None:
    """Kill each sampled container from outside; how long its exit takes to reach the host,
    and where the time goes (the daemon's ``die`` event, read raw beside the adapter)."""
    from_kill: list[float] = []
    from_exit: list[float] = []
    to_daemon_event: list[float] = []
    daemon_to_reader: list[float] = []
    reader_to_host: list[float] = []
    dies = DaemonDies(naive)
    async with anyio.create_task_group() as group:
        await group.start(dies.run)
        for p in sample:
            name = adapter.naming.container_name(p.bundle_id, "main")
            sent = await naive.kill(name)
            with anyio.fail_after(60):
                while p.bundle_id not in recorder.exited or name not in dies.seen:  # noqa: ASYNC110
                    await anyio.sleep(0.002)
            seen = recorder.exited[p.bundle_id]
            finished = await naive.finished_at(name)
            stamped, read = dies.seen[name]
            from_kill.append(seen - sent)
            from_exit.append(seen - finished)
            to_daemon_event.append(stamped - finished)
            daemon_to_reader.append(read - stamped)
            reader_to_host.append(seen - read)
        group.cancel_scope.cancel()
    print(f"  event: exit -> host        {ms(from_exit)}")
    print(f"  event: kill sent -> host   {ms(from_kill)}")
    print(f"    exit -> daemon's event   {ms(to_daemon_event)}")
    print(f"    daemon's event -> read   {ms(daemon_to_reader)}")
    print(f"    read -> host's event     {ms(reader_to_host)}  (the adapter's inspect and hub)")


def destroy_job(adapter: DockerAdapter, p: BundlePlan) -> Callable[[], Awaitable[None]]:
    """Destroy one app."""

    async def job() -> None:
        await adapter.destroy(BundleRef(p.bundle_id))

    return job


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--apps", default="10,100,500", help="comma-separated app counts")
    parser.add_argument("--host", help="an engine of yours (unix://... or tcp://...)")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT, help="applies at once")
    parser.add_argument("--cpu-millis", type=int, default=10, help="each app's CPU limit (0: none)")
    parser.add_argument("--image", help="the apps' image (default: the harness's busybox)")
    args = parser.parse_args()
    counts = [int(n) for n in args.apps.split(",")]
    if args.host:
        for apps in counts:
            anyio.run(
                measure,
                args.host,
                args.image or "busybox:1.36",
                apps,
                args.in_flight,
                args.cpu_millis,
            )
        return 0
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localdocker import DockerEngine, missing  # noqa: PLC0415 - after the path above

    absent = missing()
    if absent:
        print(f"docker apps benchmark: skipped, this machine lacks {', '.join(absent)}")
        return 0
    with (
        tempfile.TemporaryDirectory(prefix="pando-docker-apps-") as work,
        DockerEngine(Path(work)) as engine,
    ):
        print(f"docker engine (dockerd 20.10 in namespaces of its own) {engine.base_url}")
        for apps in counts:
            anyio.run(
                measure,
                engine.base_url,
                args.image or engine.busybox,
                apps,
                args.in_flight,
                args.cpu_millis,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
