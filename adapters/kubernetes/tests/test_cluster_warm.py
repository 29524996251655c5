"""A warm start on a real API server: the cache kept on disk, resumed from its versions."""

# ruff: noqa: ASYNC110, ASYNC220
from __future__ import annotations

import base64
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import yaml
from _admin_calls import core_call
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import BundleEvent, BundleEventKind, BundlePlan, BundleRef, WorkloadPlan

pytestmark = [pytest.mark.kube, pytest.mark.anyio, pytest.mark.every_minor]

IMAGE = "registry.example/warm/app:1"
CACHED = ("GET pods", "GET services", "GET persistentvolumeclaims")
"""The lists a cold start makes (a warm one reads only the kube-system namespace)."""
NO_STREAMING_LISTS = {"1.33"}
"""Minors whose API server refuses streaming lists by default (1.33's ``WatchList`` gate is off):
a warm start asks the newest version by a list that selects nothing, one ``GET pods``."""


def _run() -> str:
    """A suffix making each test's app names its own (tests run once per async backend)."""
    return uuid.uuid4().hex[:6]


def _plan(bundle_id: str) -> BundlePlan:
    return BundlePlan(bundle_id=bundle_id, workloads=(WorkloadPlan(name="web", image=IMAGE),))


async def _until_running(adapter: KubernetesAdapter, bundle_id: str) -> None:
    with anyio.fail_after(30):
        while not (await adapter.observe(BundleRef(bundle_id))).all_running:
            await anyio.sleep(0.1)


@pytest.fixture
def cached(adapter_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**adapter_config, "cache_dir": str(tmp_path / "cache")}


@pytest.fixture
async def other(adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
    """Another adapter (no cache kept), making changes while the cached one is down."""
    async with KubernetesAdapter(adapter_config) as adapter:
        yield adapter


def _store(config: dict[str, Any]) -> Path:
    (path,) = Path(config["cache_dir"]).glob("cache-*.sqlite")
    return path


def _lists(adapter: KubernetesAdapter) -> dict[str, int]:
    calls = adapter.session.connection.calls_by_kind
    return {kind: calls.get(kind, 0) for kind in (*CACHED, "GET namespaces")}


async def _first_events(
    adapter: KubernetesAdapter, until: set[tuple[BundleEventKind, str | None]]
) -> tuple[dict[str, int], list[BundleEvent]]:
    """The list calls made until the first stream opened, and its events until ``until``."""
    seen: list[BundleEvent] = []
    async with adapter.watch_bundles() as events:
        lists = _lists(adapter)
        with anyio.fail_after(60):
            async for event in events:
                seen.append(event)
                until.discard((event.kind, event.bundle_id))
                if not until:
                    break
    return lists, seen


async def test_a_warm_restart_lists_nothing_and_reports_what_changed_while_down(
    cached: dict[str, Any], other: KubernetesAdapter, admin_api: Any, kube_minor: str | None
) -> None:
    kept, gone, new = (f"Warm{what}{_run()}" for what in ("Kept", "Gone", "New"))
    async with KubernetesAdapter(cached) as first:
        assert first.health_details()["cache_start"] == "cold"
        for bundle_id in (kept, gone):
            await first.apply(_plan(bundle_id))
            await _until_running(first, bundle_id)
        before = await first.observe(BundleRef(kept))
    # While it is down: one app removed, one made.
    await other.destroy(BundleRef(gone))
    await other.apply(_plan(new))
    await _until_running(other, new)

    async with KubernetesAdapter(cached) as second:
        lists, events = await _first_events(
            second, {(BundleEventKind.REMOVED, gone), (BundleEventKind.STARTED, new)}
        )
        newest_by_list = int(kube_minor in NO_STREAMING_LISTS)  # an empty list, not the data
        assert lists == {
            **dict.fromkeys(CACHED, 0),
            "GET namespaces": 1,
            "GET pods": newest_by_list,
        }
        assert events[0].kind is BundleEventKind.WATCHING
        assert BundleEventKind.MISSED not in {e.kind for e in events}
        details = second.health_details()
        assert details["cache_start"] == "warm"
        assert int(details["cache_replayed"]) >= 2
        assert await second.observe(BundleRef(kept)) == before
        assert (await second.observe(BundleRef(new))).all_running
        with anyio.fail_after(30):
            while (await second.observe(BundleRef(gone))).exists:
                await anyio.sleep(0.2)
        await second.destroy(BundleRef(kept))
        await second.destroy(BundleRef(new))


def _writes(adapter: KubernetesAdapter) -> int:
    calls = adapter.session.connection.calls_by_kind
    return sum(n for kind, n in calls.items() if kind.split()[0] in WRITE_VERBS)


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


async def test_a_restarted_adapter_answers_at_once_but_applies_what_changed_while_down(
    cached: dict[str, Any], other: KubernetesAdapter
) -> None:
    """Observe answers from the saved cache at once; apply waits for the truth (issue 20)."""
    bundle_id = f"WarmSeen{_run()}"
    config = {**cached, "cache_max_staleness": 300}
    async with KubernetesAdapter(config) as first:
        await first.apply(_plan(bundle_id))
        await _until_running(first, bundle_id)
        saved = await first.observe(BundleRef(bundle_id))
    closed = datetime.now(UTC)
    # While it is down, another writer changes the app: a new image, so a new instance.
    changed = BundlePlan(
        bundle_id=bundle_id, workloads=(WorkloadPlan(name="web", image=f"{IMAGE}-changed"),)
    )
    await other.apply(changed)
    with anyio.fail_after(30):
        while True:
            truth = await other.observe(BundleRef(bundle_id))
            (web,) = truth.workloads
            if truth.all_running and web.instance_id != saved.workloads[0].instance_id:
                break
            await anyio.sleep(0.1)
    started = datetime.now(UTC)
    async with KubernetesAdapter(config) as second:
        at_once = await second.observe(BundleRef(bundle_id))
        assert at_once.confirmed_at is not None
        assert at_once.confirmed_at <= datetime.now(UTC)  # never later than the truth
        if at_once.confirmed_at < started:  # answered from the store: its time, its state
            assert at_once.confirmed_at <= closed
            assert at_once.workloads == saved.workloads
        writes = _writes(second)
        # The changed plan is what runs: an apply that saw it writes nothing and keeps it.
        await second.apply(changed)
        assert _writes(second) == writes
        confirmed = await second.observe(BundleRef(bundle_id), not_before=started)
        assert confirmed.confirmed_at is not None
        assert confirmed.confirmed_at >= started
        assert confirmed.workloads == truth.workloads
        assert second.health_details()["cache_start"] == "warm"
        await second.destroy(BundleRef(bundle_id))


def _expire_history(kube_cluster: Any) -> None:
    """Drop etcd's history up to now (as its periodic compaction does) and the API server's
    watch cache (a restart): a watch from an older version then gets 410 Gone."""
    if kube_cluster.local is None:
        pytest.skip("compacting etcd needs the local control plane")
    url = f"http://127.0.0.1:{kube_cluster.local.ports['etcd']}/v3/kv"

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 - loopback etcd
            f"{url}/{path}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            return dict(json.load(answer))

    # A write first, outside the API server's keys: the compacted revision is then past every
    # saved version. Without it a saved version may be the newest revision itself, which no
    # compaction expires (as 1.33 showed: nothing else had been written since the last event).
    tick = {"key": base64.b64encode(b"/pando-tests/tick").decode(), "value": ""}
    revision = post("put", tick)["header"]["revision"]
    post("compaction", {"revision": revision, "physical": True})
    kube_cluster.local.restart("kube-apiserver", crash=False)


async def test_an_expired_version_relists_and_says_missed(
    cached: dict[str, Any], kube_cluster: Any
) -> None:
    bundle_id = f"WarmExpired{_run()}"
    async with KubernetesAdapter(cached) as first:
        await first.apply(_plan(bundle_id))
        await _until_running(first, bundle_id)
    await anyio.to_thread.run_sync(_expire_history, kube_cluster)
    async with KubernetesAdapter(cached) as second:
        lists, _ = await _first_events(second, {(BundleEventKind.MISSED, None)})
        assert lists["GET pods"] >= 1
        assert second.health_details()["cache_start"] == "relisted"
        assert set(second.session.cache.start_report()["watches"].values()) == {"relisted"}
        assert (await second.observe(BundleRef(bundle_id))).all_running
        await second.destroy(BundleRef(bundle_id))


def _other_kubeconfig(config: dict[str, Any], path: Path, what: str) -> dict[str, Any]:
    """``config`` with a kubeconfig naming the same cluster by another server URL or CA.

    ``server``: ``localhost`` for ``127.0.0.1`` (the API server's certificate names both);
    ``ca``: its CA and one more certificate trusted (a bundle: another fingerprint). Its
    context keeps its name: the adapter finds the same store file.
    """
    doc = yaml.safe_load(Path(config["kubeconfig"]).read_text())
    (entry,) = doc["clusters"]
    cluster = entry["cluster"]
    if what == "server":
        cluster["server"] = cluster["server"].replace("127.0.0.1", "localhost")
    else:
        key, cert = path.with_suffix(".key"), path.with_suffix(".crt")
        request = ("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1")
        names = ("-subj", "/CN=another-ca", "-keyout", str(key), "-out", str(cert))
        subprocess.run(["openssl", *request, *names], check=True, capture_output=True)
        bundle = base64.b64decode(cluster["certificate-authority-data"]) + cert.read_bytes()
        cluster["certificate-authority-data"] = base64.b64encode(bundle).decode()
    path.write_text(yaml.safe_dump(doc))
    return {**config, "kubeconfig": str(path)}


async def _saved_without(config: dict[str, Any], bundle_id: str) -> None:
    """A store of a running ``bundle_id``, then edited to hold none of it (were the store used,
    the app would be missing)."""
    async with KubernetesAdapter(config) as first:
        await first.apply(_plan(bundle_id))
        await _until_running(first, bundle_id)
    with sqlite3.connect(_store(config)) as db:
        db.execute("DELETE FROM facts WHERE namespace = ?", (namespace_for(bundle_id),))


@pytest.mark.parametrize("what", ["server", "ca"])
async def test_a_store_of_another_server_or_ca_is_never_opened(
    cached: dict[str, Any], tmp_path: Path, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    bundle_id = f"WarmOther{what.title()}{_run()}"
    await _saved_without(cached, bundle_id)
    other = _other_kubeconfig(cached, tmp_path / "other-kubeconfig", what)
    caplog.set_level(logging.WARNING, logger="pando_runtime.kubernetes.warm")
    started = datetime.now(UTC)
    async with KubernetesAdapter({**other, "cache_max_staleness": 300}) as second:
        first_answer = await second.observe(BundleRef(bundle_id))
        assert first_answer.all_running, "listed, never the store's"
        assert first_answer.confirmed_at is not None
        assert first_answer.confirmed_at >= started
        lists, events = await _first_events(second, set())
        assert lists["GET pods"] == 1
        assert [e.kind for e in events] == [BundleEventKind.WATCHING]
        assert second.health_details()["cache_start"] == "cold"
        said = {"server": "another API server", "ca": "another certificate authority"}[what]
        assert f"written for {said}" in caplog.text
        await second.destroy(BundleRef(bundle_id))


async def test_a_store_of_another_cluster_behind_the_same_server_is_discarded_once_connected(
    cached: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Same server URL and CA, another cluster UID: what it may have said, and what follows."""
    bundle_id = f"WarmForeign{_run()}"
    await _saved_without(cached, bundle_id)
    with sqlite3.connect(_store(cached)) as db:
        db.execute("UPDATE meta SET value = 'another-cluster' WHERE key = 'cluster_uid'")
        uid = "another-cluster"
    caplog.set_level(logging.WARNING, logger="pando_runtime.kubernetes.warm")
    started = datetime.now(UTC)
    async with KubernetesAdapter({**cached, "cache_max_staleness": 300}) as second:
        early = await second.observe(BundleRef(bundle_id))
        assert early.confirmed_at is not None
        if early.confirmed_at < started:  # answered from the store, before the check: its age
            assert not early.exists
        lists, events = await _first_events(second, {(BundleEventKind.MISSED, None)})
        assert lists["GET pods"] >= 1
        assert events[0].kind is BundleEventKind.WATCHING
        assert second.health_details()["cache_start"] == "discarded"
        assert "another cluster's" in caplog.text
        assert any(r.levelname == "WARNING" for r in caplog.records)
        truth = await second.observe(BundleRef(bundle_id))
        assert truth.all_running
        assert truth.confirmed_at is not None
        assert truth.confirmed_at >= started
        with sqlite3.connect(_store(cached)) as db:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        assert meta["cluster_uid"] not in ("", uid), "the store is this cluster's now"
        await second.destroy(BundleRef(bundle_id))


HELD_CLIENT = """
import importlib.abc, importlib.machinery, json, sys, threading, time
import anyio

release, held = threading.Event(), threading.Event()


class HoldTheClient(importlib.abc.MetaPathFinder):
    # The official client's package loads only once released: whatever needs it waits.

    def find_spec(self, name, path=None, target=None):
        if name != "kubernetes":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader

        class Held(importlib.abc.Loader):
            def create_module(self, spec):
                return real.create_module(spec)

            def exec_module(self, module):
                held.set()
                release.wait(120)
                real.exec_module(module)

        spec.loader = Held()
        return spec


sys.meta_path.insert(0, HoldTheClient())
from pando_runtime import BundleRef
from pando_runtime_kubernetes import KubernetesAdapter


async def main():
    async with KubernetesAdapter(json.loads(sys.argv[1])) as adapter:
        answer = await adapter.observe(BundleRef(sys.argv[2]))
        answered_while_held = not release.is_set()
        client_then = "kubernetes.client" in sys.modules
        release.set()
        with anyio.fail_after(60):
            async with adapter.watch_bundles():
                pass  # connected and caught up once the client could load
        print(json.dumps({
            "answered_while_held": answered_while_held,
            "client_loaded_at_answer": client_then,
            "asked_for_client": held.is_set(),
            "exists": answer.exists,
            "start": adapter.health_details()["cache_start"],
        }))


anyio.run(main)
"""


async def test_a_warm_start_answers_before_the_client_is_imported(
    cached: dict[str, Any],
) -> None:
    """The store is found by the kubeconfig alone: the first answer needs no client at all."""
    bundle_id = f"WarmLight{_run()}"
    config = {**cached, "cache_max_staleness": 300}
    async with KubernetesAdapter(config) as first:
        await first.apply(_plan(bundle_id))
        await _until_running(first, bundle_id)
    try:
        result = await anyio.run_process(
            [sys.executable, "-c", HELD_CLIENT, json.dumps(config), bundle_id], check=False
        )
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        seen = json.loads(result.stdout.decode().strip().splitlines()[-1])
        assert seen == {
            "answered_while_held": True,
            "client_loaded_at_answer": False,
            "asked_for_client": True,  # the connection was being made meanwhile
            "exists": True,
            "start": "warm",
        }
    finally:
        async with KubernetesAdapter(adapter_config_of(cached)) as other:
            await other.destroy(BundleRef(bundle_id))


def adapter_config_of(cached: dict[str, Any]) -> dict[str, Any]:
    """``cached`` without its store (a cleanup that must not take the store's lock)."""
    return {k: v for k, v in cached.items() if k != "cache_dir"}


async def test_the_server_tells_its_newest_version_in_one_watch_call(
    other: KubernetesAdapter, admin_api: Any, kube_minor: str | None
) -> None:
    """The catch-up proof's version: at or past every change made before it was asked.

    Where the server refuses streaming lists (:data:`NO_STREAMING_LISTS`), a list that selects
    nothing answers instead: a second call.
    """
    from pando_runtime_kubernetes.cache._list_watch import ApiListWatch  # noqa: PLC0415
    from pando_runtime_kubernetes.cache._watch import at_or_past  # noqa: PLC0415

    bundle_id = f"WarmNewest{_run()}"
    await other.apply(_plan(bundle_id))
    try:
        namespace = await core_call(admin_api, "read_namespace", namespace_for(bundle_id))
        written = namespace.metadata.resource_version
        before = dict(other.session.connection.calls_by_kind)
        newest = await ApiListWatch(
            await other.session.connection.transport(), "/api/v1/pods"
        ).newest_version()
        after = other.session.connection.calls_by_kind
        made = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
        assert newest is not None, "the API server answers a streaming list"
        assert at_or_past(newest, written), (newest, written)
        if kube_minor in NO_STREAMING_LISTS:
            assert made == {"STREAM pods": 1, "GET pods": 1}, "a refused watch call, one list"
        else:
            assert made == {"STREAM pods": 1}, "one watch call, no list"
    finally:
        await other.destroy(BundleRef(bundle_id))


QUIET = 10.0
"""Seconds both sides must hold still, and differ, before a difference is a defect.

Once the churning process is dead nothing writes its apps' namespaces: only kwok's progress
(a pod started, a deleting pod removed) and the watch's delivery of it change either side, and
each change shows within a second or two even on a busy machine; ten quiet seconds is not lag."""
HANG = 180.0
"""A bound on the whole wait while it still sees changes: kwok settles six apps in seconds."""


def _pod_keys(pods: Any) -> set[tuple[str, str, bool]]:
    return {
        (p.metadata.name, p.metadata.uid, p.metadata.deletion_timestamp is not None) for p in pods
    }


async def _until_the_cache_agrees(after: KubernetesAdapter, core: Any, ns: str) -> None:
    """Wait until the cache holds what the API server lists in ``ns``; fail if it never will.

    Both sides are read again on every round. The rule for pods being deleted: the API server
    lists a pod with a deletion time until its DELETED event, and the cache keeps it (marked
    deleting: not live, so no host sees it as the workload's instance) until that event too,
    so each side is compared as (name, uid, deleting). The wait goes on while either side
    still changes and fails once both have held still, different, for :data:`QUIET` seconds:
    a cache that disagrees with a quiet API server is wrong, not late.
    """
    selector = "app.kubernetes.io/managed-by=pando"
    last: tuple[set[Any], set[Any]] | None = None
    still_since = anyio.current_time()
    with anyio.fail_after(HANG):
        while True:
            listed = await anyio.to_thread.run_sync(
                lambda: core.list_namespaced_pod(ns, label_selector=selector)
            )
            truth = _pod_keys(listed.items)
            cached = {(p.name, p.uid, p.deleting) for p in await after.session.reads.pods(ns)}
            if cached == truth:
                return
            now = anyio.current_time()
            if (truth, cached) != last:
                last, still_since = (truth, cached), now
            assert now - still_since < QUIET, (
                f"{ns}: the cache disagrees with a quiet API server: only cached "
                f"{sorted(cached - truth)}, only listed {sorted(truth - cached)}"
            )
            await anyio.sleep(0.2)


CHURN = """
import json, sys, anyio
from pando_runtime import BundlePlan, WorkloadPlan
from pando_runtime_kubernetes import KubernetesAdapter

async def main() -> None:
    async with KubernetesAdapter(json.loads(sys.argv[1])) as adapter:
        for i in range(1000):
            plan = BundlePlan(
                bundle_id=f"{sys.argv[3]}{i % 6}",
                workloads=(WorkloadPlan(name="web", image=f"{sys.argv[2]}-{i}"),),
            )
            await adapter.apply(plan)
            print(i, flush=True)

anyio.run(main)
"""


async def test_a_process_killed_mid_write_leaves_a_store_the_next_start_can_trust(
    cached: dict[str, Any], admin_api: Any
) -> None:
    from kubernetes import client  # noqa: PLC0415

    churn = f"WarmChurn{_run()}"
    child = subprocess.Popen(
        [sys.executable, "-c", CHURN, json.dumps(cached), IMAGE, churn],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    try:
        # Killed while it applies (and its flusher writes) several apps a second.
        for _ in range(15):
            line = await anyio.to_thread.run_sync(child.stdout.readline)
            assert line, "the churning adapter ended early"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    core = client.CoreV1Api(admin_api)
    async with KubernetesAdapter(cached) as after:  # the dead process's lock is released
        assert after.health_details()["cache_start"] in ("warm", "cold")
        with anyio.fail_after(60):
            async with after.watch_bundles():
                pass  # synced: caught up
        for i in range(6):
            await _until_the_cache_agrees(after, core, namespace_for(f"{churn}{i}"))
        for i in range(6):
            await after.destroy(BundleRef(f"{churn}{i}"))
