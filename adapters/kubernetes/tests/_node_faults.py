"""What the node-fault tests watch while a fault runs: an app on the real node, seen four ways.

- on the node itself: containerd's own list of the app's containers (each pod's sandbox and
  its container, by the pod uid label) and each one's task (main process id and status);
- the container answering: HTTP from the node's namespace to the pod's address, polled all
  through the fault;
- the adapter's ``observe`` (instance ids, start times, health...);
- the adapter's ``watch_bundles``, opened again if it is lost, as a host does.

:class:`WatchedApp` takes a picture of each before the fault and compares after it; its
:meth:`WatchedApp.control` kills the app's container for real and shows that every one of
those checks sees it (so a check that passed could have failed).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest
from _real import new_id, serve, sh, wait_for
from localcluster.realnode import faults
from localcluster.realnode.netns import connects_from
from localcluster.realnode.stack import RealNode
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import (
    AdapterFailed,
    AdapterUnavailable,
    BundleEvent,
    BundleEventKind,
    BundlePlan,
    BundleRef,
    HealthCheck,
    ObservedBundle,
    PandoRuntimeError,
    Port,
)

WEB_PORT = 8080
WORKLOADS = ("web", "idle")
IDLE = "trap 'exit 143' TERM; while :; do sleep 3600 & wait $!; done"
"""A workload that only waits (and ends at once on TERM)."""
ANSWER_WITHIN = 10.0
"""Seconds one HTTP request to the web container may take (a busy machine is slow, not down)."""
SETTLE = 120.0
"""Seconds a node has, after a fault, to run a new app and report it."""


def app_plan(bundle_id: str) -> BundlePlan:
    """Two workloads: ``web`` serves HTTP and is health-checked each second; ``idle`` waits."""
    health = HealthCheck(http_path="/", port=WEB_PORT, interval_seconds=1, timeout_seconds=2)
    web = serve("web", WEB_PORT, ports=(Port(WEB_PORT),), health=health)
    return BundlePlan(bundle_id=bundle_id, workloads=(web, sh("idle", IDLE)))


@dataclass
class EventLog:
    """Every event of the adapter's streams; a lost stream is opened again, as a host would."""

    adapter: KubernetesAdapter
    events: list[BundleEvent] = field(default_factory=list)
    gaps: int = 0
    """``MISSED`` events and streams opened again: where the contract says to re-observe."""
    lost: list[PandoRuntimeError] = field(default_factory=list)
    """Why each stream was lost (``AdapterUnavailable``, as the contract says)."""
    silent_ends: int = 0
    """Streams that ended without saying why (the contract has none)."""
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Consume events until cancelled; ``started`` once the first stream is watching."""
        first = True
        while True:
            try:
                async with self.adapter.watch_bundles() as stream:
                    async for event in stream:
                        if event.kind is BundleEventKind.WATCHING:
                            if first:
                                task_status.started()
                                first = False
                            else:
                                self.gaps += 1
                        elif event.kind is BundleEventKind.MISSED:
                            self.gaps += 1
                        self.events.append(event)
                        self._arrived.set()
                        self._arrived = anyio.Event()
                self.silent_ends += 1
            except (AdapterUnavailable, AdapterFailed) as error:
                self.lost.append(error)
            await anyio.sleep(0.2)  # a host's pause before it opens the stream again

    def of(self, bundle_id: str) -> list[BundleEvent]:
        """The events of one bundle, in order."""
        return [e for e in self.events if e.bundle_id == bundle_id]

    async def wait_for(
        self,
        check: Callable[[BundleEvent], bool],
        *,
        timeout: float = SETTLE,  # noqa: ASYNC109 - a deadline for the whole poll
    ) -> BundleEvent:
        """The first event (seen so far or to come) for which ``check`` holds."""
        with anyio.move_on_after(timeout):
            while not (found := [e for e in self.events if check(e)]):
                await self._arrived.wait()
            return found[0]
        raise AssertionError(f"no such event within {timeout:.0f} s; events: {self.events}")


@dataclass
class Answers:
    """The web container asked over HTTP, from the node's namespace, every half second."""

    netns: str
    address: str
    answered: list[float] = field(default_factory=list)
    """When it answered (``time.monotonic()``)."""
    failed: list[float] = field(default_factory=list)
    """When it did not."""

    async def run(self) -> None:
        while True:
            body = await anyio.to_thread.run_sync(
                connects_from, self.netns, self.address, WEB_PORT, ANSWER_WITHIN
            )
            ok = body is not None and body.endswith(b"ok-web\n")
            (self.answered if ok else self.failed).append(time.monotonic())
            await anyio.sleep(0.5)

    async def answers_after(self, moment: float, *, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Wait until an answer came after ``moment`` (a container that runs then)."""
        with anyio.fail_after(timeout):
            while not any(t > moment for t in self.answered):  # noqa: ASYNC110 - polled
                await anyio.sleep(0.1)

    async def fails_after(self, moment: float, *, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Wait until an attempt after ``moment`` got no answer."""
        with anyio.fail_after(timeout):
            while not any(t > moment for t in self.failed):  # noqa: ASYNC110 - polled
                await anyio.sleep(0.1)


@dataclass(frozen=True)
class NodePicture:
    """The app as the node and the API server have it: containerd's containers of each pod,
    their tasks, and each pod's container statuses (id, start, restarts, readiness)."""

    containers: dict[str, frozenset[str]]
    """Pod uid -> the ids containerd holds for it (the sandbox's and the container's)."""
    tasks: dict[str, faults.Task]
    """Container id -> its task, for every id above."""
    statuses: dict[str, tuple[str, str, int, bool]]
    """Workload -> (container id, started at, restart count, ready), from the API server."""


@dataclass(frozen=True)
class AppOnNode:
    """Where the app runs: the node, the admin client that reads its pods, its bundle id."""

    node: RealNode
    admin_api: Any
    bundle_id: str

    async def pods(self) -> dict[str, Any]:
        """Each workload's pod (not being deleted), read with the admin identity."""
        from kubernetes import client  # noqa: PLC0415

        core = client.CoreV1Api(self.admin_api)
        ns = namespace_for(self.bundle_id)
        pods = await anyio.to_thread.run_sync(lambda: core.list_namespaced_pod(ns).items)
        return {
            status.name: pod
            for pod in pods
            if pod.metadata.deletion_timestamp is None
            for status in pod.status.container_statuses or ()
            if status.name in WORKLOADS
        }

    async def picture(self) -> NodePicture:
        """The node's and the API server's view of the app now."""
        containers: dict[str, frozenset[str]] = {}
        statuses = {}
        for workload, pod in (await self.pods()).items():
            uid = pod.metadata.uid
            held = await anyio.to_thread.run_sync(faults.pod_containers, self.node, uid)
            containers[uid] = frozenset(held)
            status = next(s for s in pod.status.container_statuses if s.name == workload)
            started = status.state.running.started_at if status.state.running else None
            statuses[workload] = (
                status.container_id,
                str(started),
                status.restart_count,
                bool(status.ready),
            )
        running = await anyio.to_thread.run_sync(faults.tasks, self.node)
        ids = set().union(*containers.values())
        return NodePicture(
            containers=containers,
            tasks={i: running[i] for i in sorted(ids) if i in running},
            statuses=statuses,
        )


@dataclass
class WatchedApp:
    """An app on the real node, its state before the fault, and its :class:`EventLog` and
    :class:`Answers` running."""

    adapter: KubernetesAdapter
    where: AppOnNode
    observed: ObservedBundle
    """What ``observe`` said before the fault."""
    picture: NodePicture
    """What the node and the API server had before the fault."""
    events: EventLog
    answers: Answers
    markers: list[str] = field(default_factory=list)

    @property
    def bundle_id(self) -> str:
        return self.where.bundle_id

    def container_id(self, workload: str) -> str:
        """The id of ``workload``'s container (``containerd://`` stripped)."""
        return self.picture.statuses[workload][0].split("://", 1)[-1]

    async def runs_on(self, *, runtime_up: bool = True) -> None:
        """During a fault: the web container answers after it began, and containerd (when it
        is up) lists the same tasks as before."""
        await self.answers.answers_after(time.monotonic())
        if runtime_up:
            tasks = await anyio.to_thread.run_sync(faults.tasks, self.where.node)
            assert {i: tasks.get(i) for i in self.picture.tasks} == self.picture.tasks

    async def settled(self) -> None:
        """After a fault: a new app (a marker) is run by the node, and its start reaches the
        adapter's stream and ``observe``; so the node and the adapter work again."""
        marker = new_id("marker")
        self.markers.append(marker)
        plan = BundlePlan(bundle_id=marker, workloads=(sh("idle", IDLE),))
        with anyio.fail_after(SETTLE):
            while True:
                try:
                    await self.adapter.apply(plan)
                    break
                except (AdapterUnavailable, AdapterFailed):
                    await anyio.sleep(0.5)  # a runtime coming back: a host applies again
        await self.events.wait_for(
            lambda e: e.bundle_id == marker and e.kind is BundleEventKind.STARTED
        )
        await wait_for(self.adapter, marker, lambda o: o.all_running, timeout=SETTLE)

    async def assert_untouched(self) -> None:
        """The app is as it was before the fault: on the node, to ``observe``, in events, and
        it answered every request."""
        after = await self.where.picture()
        assert after == self.picture, f"before {self.picture}\nafter {after}"
        observed = await self.adapter.observe(BundleRef(self.bundle_id))
        assert observed.workloads == self.observed.workloads, (
            f"before {self.observed.workloads}\nafter {observed.workloads}"
        )
        assert self.events.of(self.bundle_id) == []
        assert self.answers.failed == [], f"{len(self.answers.failed)} requests not answered"

    async def control(self) -> None:
        """Kill the web container for real: every check above now sees it."""
        web = self.container_id("web")
        killed = time.monotonic()
        await anyio.to_thread.run_sync(faults.kill_task, self.where.node, web)

        def web_task() -> faults.Task | None:
            return faults.tasks(self.where.node).get(web)

        before = self.picture.tasks[web]
        with anyio.fail_after(60):
            while (task := await anyio.to_thread.run_sync(web_task)) == before:  # noqa: ASYNC110
                # polled: containerd says so only when asked
                await anyio.sleep(0.2)
        assert task is None or task.status != "RUNNING", task
        # Its probe may fail first (HEALTH_CHANGED); then the exit, with SIGKILL's code.
        event = await self.events.wait_for(
            lambda e: e.bundle_id == self.bundle_id and e.kind is BundleEventKind.EXITED,
            timeout=60,
        )
        assert (event.workload, event.exit_code) == ("web", 137), event
        observed = await wait_for(self.adapter, self.bundle_id, lambda o: o.workload("web").ended)
        assert observed.workload("web").exit_code == 137
        assert observed.workload("idle") == self.observed.workload("idle")
        await self.answers.fails_after(killed)
        # The very check each fault passed fails now.
        with pytest.raises(AssertionError):
            await self.assert_untouched()


@contextlib.asynccontextmanager
async def watched_app(
    adapter: KubernetesAdapter, admin_api: Any, node: RealNode
) -> AsyncIterator[WatchedApp]:
    """Apply :func:`app_plan`, wait until it runs and is healthy, take its pictures, and watch
    it (events, answers) for the block; then destroy it and the markers."""
    where = AppOnNode(node, admin_api, new_id("faulted"))
    markers: list[str] = []
    await adapter.apply(app_plan(where.bundle_id))
    try:
        observed = await wait_for(
            adapter,
            where.bundle_id,
            lambda o: o.all_running and o.workload("web").healthy is True,
            timeout=SETTLE,
        )
        picture = await where.picture()
        assert len(picture.tasks) == 4, picture  # two pods: a sandbox and a container each
        assert all(t.status == "RUNNING" for t in picture.tasks.values()), picture
        address = (await where.pods())["web"].status.pod_ip
        answers = Answers(node.network.node, address)
        app = WatchedApp(adapter, where, observed, picture, EventLog(adapter), answers, markers)
        async with anyio.create_task_group() as group:
            await group.start(app.events.run)
            group.start_soon(answers.run)
            await answers.answers_after(time.monotonic())
            answers.failed.clear()  # from its first answer on, every request counts
            yield app
            group.cancel_scope.cancel()
    finally:
        for bundle in (where.bundle_id, *markers):
            with anyio.CancelScope(shield=True):
                await adapter.destroy(BundleRef(bundle))
