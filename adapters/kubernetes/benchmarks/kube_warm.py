"""Benchmark: a cold start against a warm one (``cache_dir``), with apps changed while down.

    python adapters/kubernetes/benchmarks/kube_warm.py [--apps 200] [--churn 20] [--downs 5,60,300]
    python adapters/kubernetes/benchmarks/kube_warm.py --apps 1000 --churn-rate 2 --downs 60,300

It starts the local control plane (tests/support/localcluster) with kwok nodes for every pod and
applies N one-workload apps. Then, for each down time D: a fresh adapter process with
``cache_dir`` brings the store up to date and stops; while no adapter runs, ``--churn`` apps
(or ``--churn-rate`` apps a second) are re-applied with a new image, spread over the first 90% of
D (their pods are replaced: about six watch events each); at D a fresh adapter process starts
warm (the store) answering at once, one warm from the same store asking for an answer confirmed
after its start (``not_before``), then one cold (no store). The figures are the seconds from its
start to its first answered observe and how old that answer was, an observe pass over every app
right after it, when it caught up, its API calls (the lists among them), the bytes it received,
its memory, the time to load the store, for the
warm one how its cache started (``warm``, or ``relisted`` once the API server no longer holds
the saved version) and the events it replayed, and the API server's watch cache for pods: its
capacity in events, and how many it had received since the store was saved.
Each start is also measured from its process's start (``from process start``: the interpreter,
the imports, then the adapter to its first answer), beside a fresh process of the fake adapter
holding as many apps (its state file) answering its first observe.
Prints figures; asserts only that the run did what it says (a warm start either resumed and
listed nothing, or relisted because its version was gone).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:  # the test support packages join the path in main()
    from localcluster import LocalCluster

    from pando_runtime import BundlePlan

ROOT = Path(__file__).resolve().parents[3]
PODS_PER_NODE = 110
LISTS = ("GET pods", "GET services", "GET persistentvolumeclaims")
NO_STREAMING_LISTS = {"1.33"}
"""Minors whose API server refuses streaming lists by default (1.33: the WatchList gate is off)."""


def bundle_id(i: int) -> str:
    return f"warm-{i:05d}"


def plan(i: int, image: str = "registry.example/bench/app:1") -> BundlePlan:
    import pando_runtime as pr  # noqa: PLC0415 - children that never plan stay light

    web = pr.WorkloadPlan(
        name="web",
        image=image,
        resources=pr.Resources(cpu_millis=10, memory_bytes=16 * 1024**2),
    )
    return pr.BundlePlan(bundle_id=bundle_id(i), workloads=(web,))


SPAWNED_ENV = "KUBE_WARM_SPAWNED"
"""The parent's ``time.time()`` when it started the child: seconds from the process's start."""
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Children cache their bytecode, as an installed package has it."""
FAKE_CONFIG = {"nodes": 64, "node_cpu_millis": 64_000, "node_memory_bytes": 256 * 1024**3}
"""Room for every app on the fake (its default nodes would refuse thousands)."""

MAX_STALENESS = 120.0
"""``cache_max_staleness`` of the measured adapters (default 30 s): a saved cache answers at once
only when confirmed within it, so every down time measured here (60 s included) is within it."""


def config(kubeconfig: str, cache_dir: str | None) -> dict[str, Any]:
    return {
        "kubeconfig": kubeconfig,
        "trust_network_policy": True,
        "api_qps": 1000.0,
        "api_burst": 200,
        "schedule_wait": 120.0,
        "read_timeout": 120.0,
        "cache_dir": cache_dir,
        "cache_max_staleness": MAX_STALENESS,
    }


async def each(count: int, concurrency: int, fn: Callable[[int], Awaitable[object]]) -> None:
    limiter = anyio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            await fn(i)

    async with anyio.create_task_group() as group:
        for i in range(count):
            group.start_soon(one, i)


def rss_kib() -> int:
    """This process's resident memory now (KiB), from ``/proc/self/status``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def load_store(cache_dir: str) -> dict[str, float]:
    """Load the saved store as a start does (no adapter): seconds, apps, and its memory."""
    import sqlite3  # noqa: PLC0415

    from pando_runtime_kubernetes.cache._warm import DiskCache  # noqa: PLC0415

    stores = list(Path(cache_dir).glob("cache-*.sqlite"))
    if not stores:
        return {"seconds": 0.0, "apps": 0, "kib": 0}
    (path,) = stores
    with contextlib.closing(sqlite3.connect(path)) as db:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    disk = DiskCache(path.parent)
    disk.path, disk.lock_path = path, path.with_suffix(".lock")
    disk.open()
    try:
        before = rss_kib()
        start = time.perf_counter()
        state = disk.load({k: v for k, v in meta.items() if k not in ("flushed", "confirmed")})
        seconds = time.perf_counter() - start
        kib = rss_kib() - before
    finally:
        disk.close()
    return {"seconds": seconds, "apps": len(state.namespaces) if state else 0, "kib": kib}


def child_start(kubeconfig: str, cache_dir: str | None, apps: int, mode: str) -> dict[str, Any]:
    """A fresh adapter process: to its first answered observe, what it cost, how it started.

    ``mode``: ``at_once`` (a plain observe) or ``confirmed`` (``not_before`` the start). Then
    an observe pass over every app, as a host reconciling after its own restart makes.
    """
    spawned = float(os.environ[SPAWNED_ENV])
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    from pando_runtime import BundleRef  # noqa: PLC0415

    imported = time.time() - spawned

    async def run() -> dict[str, Any]:
        start = time.perf_counter()
        started = datetime.now(UTC)
        not_before = started if mode == "confirmed" else None
        async with KubernetesAdapter(config(kubeconfig, cache_dir)) as adapter:
            entered = time.perf_counter() - start
            ref = BundleRef(bundle_id(apps - 1))
            observed = await adapter.observe(ref, not_before=not_before)
            seconds = time.perf_counter() - start
            from_start = time.time() - spawned
            # Whether the answer came before the client was loaded and the cluster connected.
            client_then = "kubernetes.client" in sys.modules
            connected_then = getattr(adapter.session.cache, "connected", True)
            assert observed.exists, "the last app exists"
            assert observed.confirmed_at is not None
            age = (started - observed.confirmed_at).total_seconds()
            synced_then = adapter.cache is not None and adapter.cache.synced
            pass_start = time.perf_counter()
            ages = []
            for i in range(apps):
                answer = await adapter.observe(BundleRef(bundle_id(i)), not_before=not_before)
                assert answer.confirmed_at is not None
                ages.append((started - answer.confirmed_at).total_seconds())
            pass_seconds = time.perf_counter() - pass_start
            report = adapter.session.cache.start_report()
            calls = adapter.session.connection.calls_by_kind
            # Caught up (the event stream opens once it is): what the start cost in all.
            with anyio.fail_after(300):
                async with adapter.watch_bundles():
                    pass
            caught_up = time.perf_counter() - start
            return {
                "seconds": seconds,
                "entered": entered,
                "from_start": from_start,
                "imported": imported,
                "age": age,
                "synced_then": synced_then,
                "client_then": client_then,
                "connected_then": connected_then,
                "pass": pass_seconds,
                "oldest_in_pass": max(ages),
                "caught_up": caught_up,
                "calls": adapter.api_calls,
                "lists": sum(calls.get(kind, 0) for kind in LISTS),
                "bytes": (await adapter.session.connection.transport()).bytes_received,
                "start": report["start"],
                "replayed": report["replayed"],
                "rss_kib": rss_kib(),
            }

    return anyio.run(run)


def fake_start(state_file: str, apps: int) -> dict[str, float]:
    """A fresh process of the fake adapter holding ``apps`` apps: to its first observe."""
    spawned = float(os.environ[SPAWNED_ENV])
    import pando_runtime as pr  # noqa: PLC0415

    imported = time.time() - spawned

    async def run() -> dict[str, float]:
        config = {**FAKE_CONFIG, "state_file": state_file}
        async with pr.load_adapter("fake", config) as adapter:
            observed = await adapter.observe(pr.BundleRef(bundle_id(apps - 1)))
            from_start = time.time() - spawned
            assert observed.exists, "the last app exists"
        return {"from_start": from_start, "imported": imported}

    return anyio.run(run)


async def fake_setup(state_file: str, apps: int) -> None:
    """Apply ``apps`` apps to the fake adapter, kept in ``state_file``."""
    import pando_runtime as pr  # noqa: PLC0415

    async with pr.load_adapter("fake", {**FAKE_CONFIG, "state_file": state_file}) as adapter:
        for i in range(apps):
            await adapter.apply(plan(i))


def spawn(argv: list[str]) -> dict[str, Any]:
    """Run a child of this script (its start time in ``SPAWNED_ENV``); its last line, parsed."""
    env = {**CHILD_ENV, SPAWNED_ENV: repr(time.time())}
    result = subprocess.run(
        [sys.executable, __file__, *argv],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the adapter process failed:\n{result.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def run_fake(state_file: str, apps: int) -> dict[str, float]:
    """The best of three fresh fake processes (the fake's start varies with the machine's load)."""
    runs = [spawn(["--fake-child", state_file, str(apps)]) for _ in range(3)]
    return min(runs, key=lambda r: r["from_start"])


def run_child(
    kubeconfig: str, cache_dir: str | None, apps: int, mode: str = "at_once"
) -> dict[str, Any]:
    return spawn(["--child", kubeconfig, str(apps), cache_dir or "-", mode])


async def setup(kubeconfig: str, apps: int, concurrency: int) -> None:
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    from pando_runtime import BundleRef  # noqa: PLC0415

    async with KubernetesAdapter(config(kubeconfig, None)) as adapter:
        start = time.perf_counter()
        await each(apps, concurrency, lambda i: adapter.apply(plan(i)))
        print(f"applied:      {apps} apps in {time.perf_counter() - start:.1f} s")
        with anyio.fail_after(600):
            while not (await adapter.observe(BundleRef(bundle_id(apps - 1)))).all_running:  # noqa: ASYNC110 - polls the cluster
                await anyio.sleep(0.5)


def print_start(label: str, r: dict[str, Any]) -> None:
    print(
        f"{label:13s} {r['from_start']:.3f} s from process start to the first observe "
        f"(interpreter and imports {r['imported']:.3f} s), of which "
        f"{r['seconds']:.3f} s from the adapter's start ({r['entered']:.3f} s to enter it; "
        f"confirmed {r['age']:.1f} s "
        f"before the start, synced: {r['synced_then']}, client loaded: {r['client_then']}, "
        f"connected: {r['connected_then']}), a pass over every app "
        f"{r['pass']:.2f} s (oldest answer {r['oldest_in_pass']:.1f} s), caught up at "
        f"{r['caught_up']:.2f} s, {r['calls']} calls ({r['lists']} lists), "
        f"{r['bytes'] / 1024:.0f} KiB received, start {r['start']}, replayed {r['replayed']}, "
        f"RSS {r['rss_kib'] / 1024:.0f} MiB"
    )


_GAUGE = re.compile(
    r"^(?:apiserver_)?watch_cache_(?P<name>capacity|events_received_total)\{(?P<labels>[^}]*)\} "
    r"(?P<value>\S+)$",
    re.MULTILINE,
)


def pods_watch_cache(cluster: LocalCluster) -> dict[str, int]:
    """The API server's watch cache for pods: ``capacity`` and ``events_received_total``."""
    status, text = cluster.rest.get("/metrics")
    assert status == HTTPStatus.OK, f"metrics: HTTP {status}"
    found: dict[str, int] = {}
    for match in _GAUGE.finditer(text):
        if 'resource="pods"' in match["labels"]:
            found[match["name"]] = found.get(match["name"], 0) + round(float(match["value"]))
    return found


async def churn_spread(kubeconfig: str, count: int, image: str, spread: float) -> None:
    """Re-apply the first ``count`` apps with ``image``, in ten waves over ``spread`` seconds."""
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    waves = [range(w * count // 10, (w + 1) * count // 10) for w in range(10)]
    started = anyio.current_time()
    async with KubernetesAdapter(config(kubeconfig, None)) as adapter:
        for w, wave in enumerate(waves):
            await anyio.sleep_until(started + spread * w / 10)
            async with anyio.create_task_group() as group:
                for i in wave:
                    group.start_soon(adapter.apply, plan(i, image))


def taking_turns(
    kubeconfig: str, cache_dir: str, kept: str, apps: int, pairs: int
) -> list[dict[str, Any]]:
    """``pairs`` more warm (at once) and cold starts taking turns, cold first: both meet the
    machine's load alike (the first warm start above runs as the churn settles). Each warm
    start resumes from the same store. Prints each, and the medians; returns the warm ones."""
    if pairs < 1:
        return []
    warm: list[dict[str, Any]] = []
    cold: list[dict[str, Any]] = []
    for turn in range(pairs):
        for mode in ("cold", "warm") if turn % 2 == 0 else ("warm", "cold"):
            if mode == "cold":
                cold.append(run_child(kubeconfig, None, apps))
                continue
            shutil.rmtree(cache_dir)
            shutil.copytree(kept, cache_dir)
            warm.append(run_child(kubeconfig, cache_dir, apps, "at_once"))
    for label, runs in (("warm at once", warm), ("cold", cold)):
        figures = ", ".join(
            f"{r['from_start']:.3f} s ({r['imported']:.3f} s; {r['seconds']:.3f} s)" for r in runs
        )
        print(f"  taking turns, {label}: {figures}")
    w = statistics.median(r["from_start"] for r in warm)
    c = statistics.median(r["from_start"] for r in cold)
    print(
        f"  taking turns, from process start (medians of {pairs}): warm {w:.3f} s, "
        f"cold {c:.3f} s ({c / w:.2f}x); warm from the adapter's start "
        f"{statistics.median(r['seconds'] for r in warm):.3f} s, imports "
        f"{statistics.median(r['imported'] for r in warm):.3f} s; cold from the adapter's "
        f"start {statistics.median(r['seconds'] for r in cold):.3f} s, imports "
        f"{statistics.median(r['imported'] for r in cold):.3f} s"
    )
    return warm


def restart(  # noqa: PLR0917 - one restart's inputs
    cluster: LocalCluster,
    cache_dir: str,
    args: argparse.Namespace,
    round_: int,
    down: float,
    fake: dict[str, float],
) -> None:
    """One restart of ``down`` seconds with churn: the warm start, then a cold one."""
    kubeconfig = str(cluster.kubeconfig)
    run_child(kubeconfig, cache_dir, args.apps)  # the store as of now
    before = pods_watch_cache(cluster)
    started = time.perf_counter()
    count = round(args.churn_rate * down) if args.churn_rate else args.churn
    count = min(count, args.apps)
    anyio.run(
        churn_spread, kubeconfig, count, f"registry.example/bench/app:{round_ + 2}", down * 0.9
    )
    time.sleep(max(0.0, down - (time.perf_counter() - started)))
    seen = pods_watch_cache(cluster)
    # Both warm starts resume from the same store (the first one writes it on its way out).
    kept = f"{cache_dir}.kept"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(cache_dir, kept)
    loaded = load_store(cache_dir)
    warm = run_child(kubeconfig, cache_dir, args.apps, "at_once")
    shutil.rmtree(cache_dir)
    shutil.copytree(kept, cache_dir)
    confirmed = run_child(kubeconfig, cache_dir, args.apps, "confirmed")
    cold = run_child(kubeconfig, None, args.apps)
    print(f"down {down:.0f} s, {count} apps re-applied while down:")
    print(
        f"  the store: {loaded['apps']:.0f} apps loaded in {loaded['seconds']:.3f} s "
        f"(+{loaded['kib'] / 1024:.0f} MiB)"
    )
    print_start("  warm at once:", warm)
    print_start("  warm confirmed:", confirmed)
    print_start("  cold:", cold)
    events = seen.get("events_received_total", 0) - before.get("events_received_total", 0)
    print(
        f"  from process start: warm {warm['from_start']:.3f} s, cold {cold['from_start']:.3f} s "
        f"({cold['from_start'] / warm['from_start']:.2f}x), the fake with {args.apps} apps "
        f"{fake['from_start']:.3f} s (interpreter and imports {fake['imported']:.3f} s)"
    )
    print(
        f"  speed-up at once {cold['seconds'] / warm['seconds']:.1f}x, confirmed "
        f"{cold['seconds'] / confirmed['seconds']:.1f}x; the API server's pod watch cache: "
        f"capacity {seen.get('capacity', 0)} events, {events} received while down"
    )
    turns = taking_turns(kubeconfig, cache_dir, kept, args.apps, args.pairs)
    # A server that refuses streaming lists is asked the newest version by an empty list.
    newest_by_list = int(args.minor in NO_STREAMING_LISTS)
    for run in (warm, confirmed, *turns):
        if run["start"] == "warm":
            assert run["lists"] <= newest_by_list, "a resumed start lists nothing"
        else:
            assert run["start"] == "relisted", run


def local_cluster(stack: contextlib.ExitStack, apps: int, minor: str | None = None) -> LocalCluster:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster import LocalCluster, NodeSpec  # noqa: PLC0415

    count = max(2, math.ceil(apps * 1.2 / PODS_PER_NODE))
    nodes = [
        NodeSpec(f"kwok-node-{i}", cpu="64", memory="256Gi", pods=PODS_PER_NODE)
        for i in range(count)
    ]
    return stack.enter_context(LocalCluster(nodes=nodes, minor=minor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=200)
    parser.add_argument("--churn", type=int, default=20, help="apps re-applied while down")
    parser.add_argument(
        "--churn-rate", type=float, default=0.0, help="apps re-applied a second while down"
    )
    parser.add_argument("--downs", default="5", help="seconds down, comma-separated")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--pairs", type=int, default=0, help="more warm and cold starts taking turns, per down"
    )
    parser.add_argument("--minor", help="an older Kubernetes minor's control plane, e.g. 1.33")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--fake-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_child:
        state_file, apps = args.fake_child
        print(json.dumps(fake_start(state_file, int(apps))))
        return
    if args.child:
        kubeconfig, apps, cache_dir, mode = args.child
        store = None if cache_dir == "-" else cache_dir
        print(json.dumps(child_start(kubeconfig, store, int(apps), mode)))
        return
    downs = [float(d) for d in args.downs.split(",")]
    with contextlib.ExitStack() as stack:
        cluster = local_cluster(stack, args.apps, args.minor)
        kubeconfig = str(cluster.kubeconfig)
        cache_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="kube-warm-"))
        anyio.run(setup, kubeconfig, args.apps, args.concurrency)
        print_start("first (cold):", run_child(kubeconfig, cache_dir, args.apps))
        state_file = str(Path(f"{cache_dir}.fake") / "state.json")
        Path(state_file).parent.mkdir(exist_ok=True)
        stack.callback(shutil.rmtree, Path(state_file).parent, ignore_errors=True)
        anyio.run(fake_setup, state_file, args.apps)
        fake = run_fake(state_file, args.apps)
        for round_, down in enumerate(downs):
            restart(cluster, cache_dir, args, round_, down, fake)
        churn = f"{args.churn_rate:g} a second" if args.churn_rate else str(args.churn)
        print(f"apps: {args.apps}, re-applied while down: {churn}, downs: {args.downs} s")


if __name__ == "__main__":
    main()
