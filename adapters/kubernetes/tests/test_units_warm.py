"""The cache kept on disk (pure logic): the SQLite store, its safety checks, a resumed watch."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from pando_runtime_kubernetes.api._errors import ApiError
from pando_runtime_kubernetes.cache._informer import Informer
from pando_runtime_kubernetes.cache._list_watch import ApiListWatch, SharedAnswer
from pando_runtime_kubernetes.cache._projections import project_namespace, project_pod
from pando_runtime_kubernetes.cache._resume import resume, snapshot
from pando_runtime_kubernetes.cache._warm import SCHEMA, DiskCache, WarmCache
from pando_runtime_kubernetes.cache._watch import WatchLoop, at_or_past
from pando_runtime_kubernetes.cache._write_through import remember

from pando_runtime import AdapterUnavailable, BundleEventKind

pytestmark = pytest.mark.anyio

IDENTITY = {
    "schema": SCHEMA,
    "adapter": "1.0",
    "server": "https://127.0.0.1:6443",
    "ca": "sha256:a",
}


def _pod(ns: str, name: str, *, running: bool = True, version: int = 5) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "namespace": ns,
            "name": name,
            "uid": f"u-{name}",
            "resourceVersion": str(version),
            "labels": {"pando.dev/workload": "web", "pando.dev/bundle": "A"},
            "annotations": {"pando.dev/bundle-id": "A", "pando.dev/created": "7"},
        },
        "spec": {
            "nodeName": "n1",
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c1"}}],
            "containers": [
                {"name": "web", "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}}}
            ],
        },
        "status": {
            "phase": "Running" if running else "Pending",
            "containerStatuses": [
                {"name": "web", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
                if running
                else {"name": "web", "state": {"waiting": {}}}
            ],
        },
    }


def _namespace(name: str) -> dict[str, Any]:
    return {
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "resourceVersion": "3",
            "annotations": {"pando.dev/bundle-id": "A", "pando.dev/workloads": "web,db"},
        },
    }


class ScriptedSource:
    """A list/watch source scripted by the test: the watches it was asked for, and how."""

    def __init__(
        self, scripts: list[list[dict[str, Any]]], *, ends: bool = False, quiet_ends: bool = False
    ) -> None:
        self.ends = ends
        """Each scripted watch ends after its script (as the server ends one at its timeout)."""
        self.quiet_ends = quiet_ends
        """A watch once the scripts are used up ends at once, with nothing sent (as the server
        ends a short watch that holds its newest version)."""
        self.lists = 0
        self.watches: list[tuple[str, int | None]] = []
        self.scripts = scripts

    async def list(self, project: Any) -> tuple[list[Any], str]:
        self.lists += 1
        return [], "100"

    @asynccontextmanager
    async def watch(
        self, resource_version: str, timeout_seconds: int | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        self.watches.append((resource_version, timeout_seconds))
        scripted = bool(self.scripts)
        script = self.scripts.pop(0) if scripted else []

        async def events() -> AsyncIterator[dict[str, Any]]:
            for event in script:
                yield event
            if not (self.ends if scripted else self.quiet_ends):
                await anyio.sleep_forever()

        yield events()


def _informer(sources: dict[str, Any]) -> Informer:
    return Informer(None, sources=sources, kinds=tuple(sources))


def _filled() -> Informer:
    informer = _informer({"pods": ScriptedSource([]), "namespaces": ScriptedSource([])})
    informer.pods.on_list([f for f in (project_pod(_pod("app-a", "web-1")),) if f], relist=False)
    informer.namespaces.on_list([project_namespace(_namespace("app-a"))], relist=False)
    informer.services.put("app-a", "web")
    for loop in informer.loops.values():
        loop.resource_version = "42"
    return informer


def _journaled(tmp_path: Path, informer: Informer) -> tuple[DiskCache, WarmCache]:
    """A store opened on ``tmp_path`` and a warm cache writing ``informer``'s changes to it."""
    disk = DiskCache(tmp_path)
    disk.open()
    disk.load(IDENTITY)
    warm = WarmCache(disk, informer)
    informer.namespace_changed(None)
    return disk, warm


def _reloaded(tmp_path: Path) -> Any:
    """What a new process loads from the store on ``tmp_path``."""
    disk = DiskCache(tmp_path)
    disk.open()
    try:
        return disk.load(IDENTITY)
    finally:
        disk.close()


async def test_store_round_trip_keeps_every_fact(tmp_path: Path) -> None:
    informer = _filled()
    disk = DiskCache(tmp_path, "dev")
    disk.open()
    assert disk.load(IDENTITY) is None  # a new file: nothing to resume
    warm = WarmCache(disk, informer)
    informer.namespace_changed(None)
    await warm.flush()
    disk.close()

    again = DiskCache(tmp_path, "dev")
    again.open()
    state = again.load(IDENTITY)
    again.close()
    assert state is not None
    assert state.versions == {"pods": "42", "namespaces": "42"}
    (pod,) = state.pods
    original = informer.pods.pods("app-a")[0]
    for name in type(pod).__slots__:
        assert getattr(pod, name) == getattr(original, name), name
    assert pod.claims == ("c1",)
    assert pod.limits == (250, 64 * 1024**2)
    (ns,) = state.namespaces
    assert ns.workloads == ("web", "db")
    assert state.services == [("app-a", "web")]


async def test_flush_writes_only_what_changed_and_deletes_what_went(tmp_path: Path) -> None:
    informer = _filled()
    disk, warm = _journaled(tmp_path, informer)
    await warm.flush()
    await warm.flush()
    assert warm.flushes == 1  # nothing changed: nothing written
    informer.pods.on_event("ADDED", _pod("app-b", "web-2", version=9))
    informer.namespaces.on_event("DELETED", _namespace("app-a"))
    informer.pods.on_event("DELETED", _pod("app-a", "web-1"))
    informer.services.remove("app-a", "web")
    await warm.flush()
    assert warm.flushes == 2
    disk.close()
    rows = sqlite3.connect(disk.path).execute("SELECT namespace FROM facts").fetchall()
    assert rows == [("app-b",)]


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("UPDATE meta SET value = 'https://10.0.0.1' WHERE key = 'server'", "another API server"),
        ("UPDATE meta SET value = 'sha256:b' WHERE key = 'ca'", "another certificate authority"),
        ("UPDATE meta SET value = '0.1' WHERE key = 'adapter'", "another adapter version"),
        ("UPDATE meta SET value = '0:old' WHERE key = 'schema'", "another schema"),
        ("UPDATE meta SET value = '0' WHERE key = 'flushed'", "never completely written"),
        ("DROP TABLE versions", "never completely written"),
    ],
)
async def test_a_store_of_another_kind_is_ignored_and_replaced(
    tmp_path: Path, sql: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    informer = _filled()
    disk = DiskCache(tmp_path)
    disk.open()
    disk.load(IDENTITY)
    informer.namespace_changed(None)
    await WarmCache(disk, informer).flush()
    disk.close()
    with sqlite3.connect(disk.path) as db:
        db.execute(sql)
    again = DiskCache(tmp_path)
    again.open()
    assert again.load(IDENTITY) is None
    again.close()
    assert why in caplog.text
    # replaced by an empty store of this identity: not loadable until a first flush
    meta = dict(sqlite3.connect(again.path).execute("SELECT key, value FROM meta").fetchall())
    assert meta == {**IDENTITY, "flushed": "0"}


async def test_a_corrupt_file_is_discarded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disk = DiskCache(tmp_path)
    disk.path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    disk.open()
    assert disk.load(IDENTITY) is None
    disk.close()
    assert "is not used" in caplog.text
    assert sqlite3.connect(disk.path).execute("PRAGMA quick_check").fetchone() == ("ok",)


async def test_a_second_process_on_the_same_file_is_refused(tmp_path: Path) -> None:
    first = DiskCache(tmp_path, "dev")
    first.open()
    second = DiskCache(tmp_path, "dev")
    with pytest.raises(AdapterUnavailable) as refused:
        second.open()
    assert refused.value.code == "ADAPTER_UNAVAILABLE"
    assert "another process" in refused.value.message
    assert refused.value.details["cache_dir"] == str(tmp_path)
    DiskCache(tmp_path, "other").open()  # another cluster's file is another lock
    first.close()
    second.open()  # released on close
    second.close()


async def test_a_resumed_loop_watches_from_its_version_and_syncs_on_the_bookmark() -> None:
    informer = _filled()
    state = snapshot(informer)
    source = ScriptedSource(
        [
            [
                {"type": "MODIFIED", "object": _pod("app-a", "web-1", running=False, version=50)},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "60"}}},
            ]
        ]
    )
    resumed = _informer({"pods": source})
    resume(resumed, state)
    loop = resumed.loops["pods"]
    async with resumed.running():
        assert not resumed.synced
        with anyio.fail_after(5):
            await loop.synced.wait()
        assert resumed.synced
    assert source.lists == 0
    assert source.watches == [("42", WatchLoop.catch_up_timeout)]
    assert loop.resource_version == "60"
    assert resumed.start_report() == {"start": "warm", "replayed": 1, "watches": {"pods": "warm"}}
    assert resumed.pods.pods("app-a")[0].running is False
    assert resumed.pods.take_replay() == []  # no transition worth an event; kept once only


async def test_an_expired_version_relists_and_says_missed() -> None:
    state = snapshot(_filled())
    source = ScriptedSource([[{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]])
    resumed = _informer({"pods": source})
    resume(resumed, state)
    async with resumed.running():
        with anyio.fail_after(5):
            await resumed.loops["pods"].synced.wait()
    assert source.lists == 1
    assert resumed.start_report()["start"] == "relisted"
    assert [e.kind for e in resumed.pods.take_replay()] == [BundleEventKind.MISSED]
    assert resumed.pods.pods("app-a") == []  # the list's answer, not the saved state


async def test_a_resumed_loop_at_the_newest_version_syncs_on_a_watch_with_nothing_sent() -> None:
    state = snapshot(_filled())
    modified = _pod("app-a", "web-1", running=False, version=50)
    # Events but no bookmark prove nothing: opened again; then a watch with nothing to send.
    source = ScriptedSource([[{"type": "MODIFIED", "object": modified}], []], ends=True)
    resumed = _informer({"pods": source})
    resume(resumed, state)
    async with resumed.running():
        with anyio.fail_after(5):
            await resumed.loops["pods"].synced.wait()
    assert source.lists == 0
    assert [version for version, _ in source.watches[:2]] == ["42", "50"]
    assert resumed.start_report()["replayed"] == 1


def _busy(count: int) -> list[list[dict[str, Any]]]:
    """Watches that each send one new event, as on a cluster whose pods change every second."""
    return [
        [{"type": "MODIFIED", "object": _pod("app-a", "web-1", version=50 + i)}]
        for i in range(count)
    ]


async def test_on_a_busy_cluster_a_resumed_loop_syncs_on_an_event_past_the_newest_version() -> None:
    state = snapshot(_filled())
    asked: list[str] = []

    async def newest() -> str | None:
        asked.append("newest")
        return "52"

    source = ScriptedSource(_busy(10), ends=True)
    resumed = Informer(None, sources={"pods": source}, kinds=("pods",), newest_version=newest)
    resume(resumed, state)
    async with resumed.running():
        with anyio.fail_after(5):
            await resumed.loops["pods"].synced.wait()
    assert asked == ["newest"]
    assert source.lists == 0
    # Versions 50 and 51 prove nothing; 52 is the newest the server had: caught up there.
    assert source.watches[0][0] == "42"
    assert resumed.loops["pods"].resource_version == "52"
    assert resumed.start_report()["start"] == "warm"


async def test_without_the_newest_version_a_busy_cluster_never_proves_a_catch_up() -> None:
    """What the newest version is for: each watch sends something, so none comes back empty."""
    state = snapshot(_filled())

    async def unknown() -> str | None:
        return None

    source = ScriptedSource(_busy(20), ends=True)
    resumed = Informer(None, sources={"pods": source}, kinds=("pods",), newest_version=unknown)
    resume(resumed, state)
    async with resumed.running():
        with anyio.move_on_after(3):
            while source.scripts:  # noqa: ASYNC110 - polls a plain list
                await anyio.sleep(0.05)
        assert not source.scripts, "opened again and again"
        assert not resumed.loops["pods"].synced.is_set()
    assert source.lists == 0


async def test_a_side_watch_that_comes_back_empty_proves_a_replay_complete() -> None:
    state = snapshot(_filled())
    # The replaying watch stays open; the side watch after it ends with nothing to send.
    replay = [{"type": "MODIFIED", "object": _pod("app-a", "web-1", version=50)}]
    source = ScriptedSource([replay], quiet_ends=True)
    resumed = _informer({"pods": source})
    resume(resumed, state)
    async with resumed.running():
        with anyio.fail_after(1.5):  # the replaying watch itself never ends
            await resumed.loops["pods"].synced.wait()
    assert source.lists == 0
    assert source.watches[:2] == [("42", 1), ("50", 1)], "the side watch: from the replay's end"
    assert resumed.start_report() == {"start": "warm", "replayed": 1, "watches": {"pods": "warm"}}


def test_versions_are_compared_only_as_integers() -> None:
    assert at_or_past("52", "52")
    assert at_or_past("100", "99")  # as numbers, not as text
    assert not at_or_past("51", "52")
    assert not at_or_past("abc", "52")
    assert not at_or_past("52", "")


async def test_the_newest_version_is_asked_once_for_every_watch() -> None:
    calls: list[int] = []

    async def ask() -> str | None:
        calls.append(1)
        await anyio.sleep(0.01)
        return "7"

    shared = SharedAnswer(ask)
    answers: list[str | None] = []

    async def one() -> None:
        answers.append(await shared())

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(one)
    assert calls == [1]
    assert answers == ["7"] * 4


async def test_a_failed_write_is_a_warning_not_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    informer = _filled()
    disk, warm = _journaled(tmp_path, informer)
    with sqlite3.connect(disk.path) as other:
        other.execute("DROP TABLE facts")  # every write now fails
    async with warm.running():
        pass  # the last flush on exit fails: a warning, no error
    assert "cannot write the saved cache" in caplog.text
    assert warm.flushes == 0


# -- answering at once from the saved cache (issue 20) ------------------------------------------


class GatedSource(ScriptedSource):
    """A scripted source whose watches send nothing until ``gate`` is set."""

    def __init__(self, scripts: list[list[dict[str, Any]]]) -> None:
        super().__init__(scripts)
        self.gate = anyio.Event()

    @asynccontextmanager
    async def watch(
        self, resource_version: str, timeout_seconds: int | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        async with super().watch(resource_version, timeout_seconds) as events:

            async def gated() -> AsyncIterator[dict[str, Any]]:
                await self.gate.wait()
                async for event in events:
                    yield event

            yield gated()


def _bookmark(version: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": version}}}


async def test_the_store_keeps_each_watchs_last_confirmation(tmp_path: Path) -> None:
    informer = _filled()
    disk, warm = _journaled(tmp_path, informer)
    await warm.flush()
    disk.close()
    state = _reloaded(tmp_path)
    assert state is not None
    assert state.confirmed == informer.staleness.confirmations()
    assert set(state.confirmed) == {"pods", "namespaces"}
    # A store written before confirmations were saved has none: reads then wait.
    db = sqlite3.connect(disk.path)
    db.execute("DELETE FROM meta WHERE key = 'confirmed'")
    db.commit()
    db.close()
    state = _reloaded(tmp_path)
    assert state is not None
    assert state.confirmed == {}


async def test_a_resumed_cache_serves_its_saved_state_honestly_until_it_catches_up() -> None:
    saved = _filled()
    state = snapshot(saved)
    down = timedelta(seconds=4)
    state.confirmed = {"pods": datetime.now(UTC) - down}
    source = GatedSource([[_bookmark("60")]])
    resumed = _informer({"pods": source})
    resumed.staleness.max_staleness = 30.0
    resume(resumed, state)
    async with resumed.running():
        await anyio.sleep(0.05)  # the catch-up watch is open: it proves nothing yet
        assert not resumed.synced
        assert resumed.staleness.serves_saved
        assert (
            resumed.staleness.confirmed_at() == state.confirmed["pods"]
        )  # the saved time, not now
        assert resumed.staleness.unconfirmed_for() >= down.total_seconds()
        source.gate.set()
        with anyio.fail_after(5):
            await resumed.loops["pods"].synced.wait()
        assert resumed.synced
        assert not resumed.staleness.serves_saved
        assert resumed.staleness.confirmed_at() > state.confirmed["pods"] + down / 2


async def test_a_saved_state_past_the_bound_or_of_unknown_age_is_not_served() -> None:
    state = snapshot(_filled())
    old = {"pods": datetime.now(UTC) - timedelta(seconds=60)}
    for confirmed in (old, {}):
        state.confirmed = confirmed
        resumed = _informer({"pods": GatedSource([])})
        resumed.staleness.max_staleness = 30.0
        resume(resumed, state)
        async with resumed.running():
            await anyio.sleep(0.05)
            assert not resumed.staleness.serves_saved
            assert not resumed.synced


async def test_confirm_proves_a_quiet_cache_with_one_probe_shared_by_its_callers() -> None:
    probes: list[float] = []

    async def probe(bound: float) -> None:
        probes.append(bound)
        await anyio.sleep(0.05)

    informer = Informer(None, sources={"pods": ScriptedSource([])}, kinds=("pods",), probe=probe)
    async with informer.running():
        with anyio.fail_after(5):
            await informer.loops["pods"].synced.wait()
        await anyio.sleep(0.05)
        wanted = anyio.current_time()
        assert informer.staleness.confirmed_at() < informer.clock.utc(
            wanted
        )  # quiet since the list
        answers: list[bool] = []

        async def ask() -> None:
            answers.append(await informer.staleness.confirm(wanted, timeout=5))

        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(ask)
        assert answers == [True] * 5
        assert len(probes) == 1
        assert informer.staleness.confirmed_at() >= informer.clock.utc(wanted)


async def test_confirm_gives_up_when_the_api_server_does_not_answer() -> None:
    async def probe(bound: float) -> None:
        raise ApiError(0, f"ConnectionRefusedError: refused within {bound} s")

    informer = Informer(None, sources={"pods": ScriptedSource([])}, kinds=("pods",), probe=probe)
    async with informer.running():
        with anyio.fail_after(5):
            await informer.loops["pods"].synced.wait()
        await anyio.sleep(0.05)
        assert not await informer.staleness.confirm(anyio.current_time(), timeout=0.5)
        assert not informer.liveness.reachable


class _NoStreamingLists:
    """A transport whose server refuses ``sendInitialEvents`` (``status``) and lists ``"42"``."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.calls: list[str] = []

    @asynccontextmanager
    async def stream(self, path: str, **_: Any) -> AsyncIterator[Any]:
        self.calls.append(f"STREAM {path}")
        raise ApiError(self.status, "sendInitialEvents is forbidden")
        yield  # pragma: no cover - an async generator, never reached

    async def get(self, path: str, **query: Any) -> dict[str, Any]:
        self.calls.append(f"GET {path} {sorted(query)}")
        return {"metadata": {"resourceVersion": "42"}, "items": []}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_server_refusing_streaming_lists_tells_the_newest_version_by_a_list() -> None:
    """1.33 answers 422 (its WatchList gate is off): one list that selects nothing, no limit."""
    refusing = _NoStreamingLists(422)
    newest = await ApiListWatch(refusing, "/api/v1/pods").newest_version()  # type: ignore[arg-type]
    assert newest == "42"
    assert refusing.calls == ["STREAM /api/v1/pods", "GET /api/v1/pods ['labelSelector']"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_other_refusals_leave_the_newest_version_unknown() -> None:
    forbidden = _NoStreamingLists(403)
    assert await ApiListWatch(forbidden, "/api/v1/pods").newest_version() is None  # type: ignore[arg-type]
    assert forbidden.calls == ["STREAM /api/v1/pods"]


def _deleted(body: dict[str, Any], version: int) -> dict[str, Any]:
    """``body`` as a delete's answer and its DELETED event carry it: on its way out."""
    meta = {**body["metadata"], "resourceVersion": str(version)}
    meta["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    return {**body, "metadata": meta}


async def test_a_deletes_answer_after_its_watch_event_does_not_bring_the_pod_back(
    tmp_path: Path,
) -> None:
    # A pod deleted at once (never bound to a node, or a grace of 0): the watch's DELETED
    # event and the DELETE call's answer race, and on a busy machine the event can come
    # first. The answer (write-through) must not put back what the watch removed: no later
    # event would remove it, and the flusher would hand it to the next start as true.
    informer = _informer({"pods": ScriptedSource([])})
    pod = _pod("app-a", "web-1", running=False)
    informer.pods.on_event("ADDED", pod)
    gone = _deleted(pod, 9)
    informer.pods.on_event("DELETED", gone)
    remember(informer, gone)  # the DELETE call's answer, processed after the event
    assert informer.pods.pods("app-a") == []

    informer.loops["pods"].resource_version = "9"
    disk, warm = _journaled(tmp_path, informer)
    await warm.flush()
    disk.close()
    state = _reloaded(tmp_path)
    assert state is not None
    assert state.pods == []


async def test_a_deletes_answer_before_its_watch_event_marks_the_pod_on_its_way_out() -> None:
    informer = _informer({"pods": ScriptedSource([])})
    pod = _pod("app-a", "web-1")
    informer.pods.on_event("ADDED", pod)
    remember(informer, _deleted(pod, 9))  # graceful: the pod stays until the kubelet is done
    (facts,) = informer.pods.pods("app-a")
    assert facts.deleting
    assert not facts.live
    informer.pods.on_event("DELETED", _deleted(pod, 11))
    assert informer.pods.pods("app-a") == []


async def test_a_deleted_gateway_pods_late_answer_does_not_bring_it_back() -> None:
    informer = _informer({"pods": ScriptedSource([])})
    gateway = _pod("app-a", "egress-1")
    gateway["metadata"]["labels"] = {"pando.dev/role": "egress-gateway"}
    informer.gateways.on_event("ADDED", gateway)
    assert informer.gateways.in_namespace("app-a")
    gone = _deleted(gateway, 9)
    informer.gateways.on_event("DELETED", gone)
    remember(informer, gone)
    assert informer.gateways.in_namespace("app-a") == []


async def test_a_read_answer_older_than_a_deletion_is_refused_and_a_new_pod_of_the_name_taken() -> (
    None
):
    informer = _informer({"pods": ScriptedSource([]), "namespaces": ScriptedSource([])})
    pod = _pod("app-a", "web-1", version=5)
    informer.pods.on_event("ADDED", pod)
    informer.pods.on_event("DELETED", _deleted(pod, 9))
    remember(informer, pod)  # a read that found it at version 5, handled after the event
    assert informer.pods.pods("app-a") == []
    again = {**_pod("app-a", "web-1", version=12)}
    again["metadata"] = {**again["metadata"], "uid": "u-web-1-again"}
    remember(informer, again)  # made again under the same name: newer than the deletion
    (facts,) = informer.pods.pods("app-a")
    assert facts.uid == "u-web-1-again"

    namespace = _namespace("app-a")
    informer.namespaces.on_event("ADDED", namespace)
    informer.namespaces.on_event(
        "DELETED", {**namespace, "metadata": {**namespace["metadata"], "resourceVersion": "8"}}
    )
    remember(informer, namespace)  # version 3: from before the deletion
    assert "app-a" not in informer.namespaces.by_name
    informer.pods.on_list([], relist=True)  # a list is the truth: departures are forgotten
    remember(informer, pod)
    assert [p.name for p in informer.pods.pods("app-a")] == ["web-1"]


async def _saved_for(tmp_path: Path, cluster_uid: str) -> None:
    """A store of ``_filled()`` written for the cluster ``cluster_uid``."""
    informer = _filled()
    disk, warm = _journaled(tmp_path, informer)
    await warm.verify(cluster_uid)
    await warm.flush()
    disk.close()


async def _resumed_from(tmp_path: Path) -> tuple[Informer, DiskCache, WarmCache]:
    """A new process's informer resumed from the store on ``tmp_path``, not yet verified."""
    informer = _informer({"pods": ScriptedSource([]), "namespaces": ScriptedSource([])})
    disk = DiskCache(tmp_path)
    disk.open()
    state = disk.load(IDENTITY)
    assert state is not None
    resume(informer, state)
    return informer, disk, WarmCache(disk, informer, identity=IDENTITY, resumed=True)


async def test_a_store_of_this_cluster_is_kept_at_the_check(tmp_path: Path) -> None:
    await _saved_for(tmp_path, "uid-a")
    informer, disk, warm = await _resumed_from(tmp_path)
    assert await warm.verify("uid-a")
    disk.close()
    assert informer.namespaces.by_name.keys() == {"app-a"}
    assert {loop.start for loop in informer.loops.values()} == {"warm"}
    assert {loop.resource_version for loop in informer.loops.values()} == {"42"}


async def test_a_store_of_another_cluster_behind_the_same_server_is_discarded_at_the_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _saved_for(tmp_path, "uid-a")
    informer, disk, warm = await _resumed_from(tmp_path)
    assert informer.namespaces.by_name.keys() == {"app-a"}  # answered from until the check
    assert not await warm.verify("uid-b")
    # Nothing of it answers any more, every watch lists first, and the operator is told.
    assert not informer.namespaces.by_name
    assert not informer.pods.by_namespace
    assert not informer.services.by_namespace
    assert {loop.start for loop in informer.loops.values()} == {"discarded"}
    assert not any(loop.serves_saved for loop in informer.loops.values())
    assert "another cluster's" in caplog.text
    assert caplog.records[-1].levelname == "WARNING"
    # The file is the new cluster's, and empty, before anything is flushed.
    meta = dict(sqlite3.connect(disk.path).execute("SELECT key, value FROM meta").fetchall())
    assert meta == {**IDENTITY, "flushed": "0", "cluster_uid": "uid-b"}
    assert not sqlite3.connect(disk.path).execute("SELECT * FROM facts").fetchall()
    # Once running, the lists come, and the first event stream says MISSED.
    async with informer.running():
        with anyio.fail_after(10):
            await informer.wait_synced(10)
    assert informer.start_report()["start"] == "discarded"
    assert {e.kind for e in informer.pods.take_replay()} == {BundleEventKind.MISSED}
    assert all(loop.source.lists == 1 for loop in informer.loops.values())
    disk.close()
