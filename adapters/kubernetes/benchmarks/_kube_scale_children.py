"""The child processes of ``kube_scale.py``: what must not share the applying process.

    python _kube_scale_children.py cold KUBECONFIG APPS [--qps Q --burst B --threads T]
    python _kube_scale_children.py naive KUBECONFIG APPS SECONDS
    python _kube_scale_children.py phases KUBECONFIG TARGETS_FILE OUT_FILE RATE

``cold`` and ``naive`` print their figures as one JSON line; ``phases`` writes its lines to
OUT_FILE (see :func:`child_phases`).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from kube_scale import (
    EXIT_CODE_ANNOTATION,
    ROOT,
    SELECTOR,
    adapter_config,
    bundle_id,
    observe_pass,
    rss_bytes,
    transport,
)

if TYPE_CHECKING:  # the official client loads in the children that use it
    from kubernetes.client import CoreV1Api

_Facts = TypeVar("_Facts")


def child_cold(kubeconfig: str, apps: int, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh adapter process: cold start, bytes, memory, observe pass, capacity."""
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    from pando_runtime import BundleRef  # noqa: PLC0415
    from pando_runtime.plugin import read_scope  # noqa: PLC0415

    # The official client's modules (imported when the adapter connects): a cost per process,
    # not per app, measured apart so the growth per app is the adapter's own.
    rss_bare = rss_bytes()
    import kubernetes.client  # noqa: PLC0415
    import kubernetes.config  # noqa: PLC0415, F401

    rss_imported = rss_bytes()

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {"rss_client_import": rss_imported - rss_bare}
        rss_before = rss_bytes()
        start = time.perf_counter()
        async with KubernetesAdapter(adapter_config(kubeconfig, args)) as adapter:
            observed = await adapter.observe(BundleRef(bundle_id(apps - 1)))
            out["cold_start_s"] = time.perf_counter() - start
            assert observed.exists, "the last app exists"
            out["cold_calls"] = adapter.api_calls
            out["cold_bytes"] = (await transport(adapter)).bytes_received
            await anyio.sleep(1)  # let the watch threads settle
            out["rss_growth"] = rss_bytes() - rss_before
            passes = [await observe_pass(adapter, apps) for _ in range(3)]
            out["observe_pass_s"] = statistics.median(p[0] for p in passes)
            out["observe_running"] = passes[-1][1]
            calls = adapter.api_calls
            start = time.perf_counter()
            async with read_scope():
                capacity = await adapter.capacity()
                fit = await adapter.largest_fit_for(bundle_id(0))
            out["capacity_s"] = time.perf_counter() - start
            out["capacity_calls"] = adapter.api_calls - calls
            out["capacity_nodes"] = capacity.details.get("nodes")
            out["fit"] = f"{fit.cpu_millis}m/{fit.memory_bytes >> 20}Mi" if fit else "-"
            start = time.perf_counter()
            capacity = await adapter.capacity()
            out["capacity_unscoped_s"] = time.perf_counter() - start
            out["rss_after"] = rss_bytes()
        return out

    result = anyio.run(run)
    result["cache_bytes"] = cache_bytes(kubeconfig)
    return result


def cache_bytes(kubeconfig: str) -> dict[str, float]:
    """Bytes the lean cache's projections of every managed pod, namespace and Service take."""
    from kubeadmin import admin_client, unread  # noqa: PLC0415
    from kubernetes import client  # noqa: PLC0415
    from pando_runtime_kubernetes.cache._stores import (  # noqa: PLC0415
        NamespaceStore,
        PodStore,
        ServiceStore,
    )

    def items(response: object) -> list[dict[str, Any]]:
        body = json.loads(unread(response).data)
        return list(body["items"])

    with admin_client(kubeconfig) as api_client:
        api = client.CoreV1Api(api_client)
        listed = {
            "pods": items(
                api.list_pod_for_all_namespaces(label_selector=SELECTOR, _preload_content=False)
            ),
            "namespaces": items(
                api.list_namespace(label_selector=SELECTOR, _preload_content=False)
            ),
            "services": items(
                api.list_service_for_all_namespaces(label_selector=SELECTOR, _preload_content=False)
            ),
        }
    pods, namespaces, services = PodStore(), NamespaceStore(), ServiceStore()
    held = {
        "pods": held_bytes(
            pods.project, functools.partial(pods.on_list, relist=False), listed["pods"]
        ),
        "namespaces": held_bytes(
            namespaces.project,
            functools.partial(namespaces.on_list, relist=False),
            listed["namespaces"],
        ),
        "services": held_bytes(
            services.project,
            functools.partial(services.on_list, relist=False),
            listed["services"],
        ),
    }
    out: dict[str, float] = {}
    for kind, found in listed.items():
        out[kind] = held[kind] / max(1, len(found))
        out[f"{kind}_count"] = len(found)
        out[f"{kind}_json_bytes"] = len(json.dumps(found)) / max(1, len(found))
    return out


def held_bytes(
    project: Callable[[dict[str, Any]], _Facts | None],
    hold: Callable[[list[_Facts]], None],
    found: list[dict[str, Any]],
) -> int:
    """Bytes a store takes to hold the projections (``project``) of the objects ``found``."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    hold([facts for facts in map(project, found) if facts is not None])
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    return sum(s.size_diff for s in after.compare_to(before, "filename"))


def child_naive(kubeconfig: str, apps: int, seconds: float) -> dict[str, Any]:
    """The naive host: four typed reads of the official client per app per observe."""
    from kubeadmin import admin_client  # noqa: PLC0415
    from kubernetes import client  # noqa: PLC0415

    with admin_client(kubeconfig) as api_client:
        return naive_reads(client.CoreV1Api(api_client), apps, seconds)


def naive_reads(api: CoreV1Api, apps: int, seconds: float) -> dict[str, Any]:
    """Observe ``apps`` apps (at most ``seconds``) by the official client's typed reads."""
    rss_before = rss_bytes()
    done = calls = running = 0
    start = time.perf_counter()
    for i in range(apps):
        ns = f"pando-{bundle_id(i)}"
        api.read_namespace(ns)
        pods = api.list_namespaced_pod(ns, label_selector=SELECTOR)
        api.list_namespaced_service(ns, label_selector=SELECTOR)
        api.list_namespaced_persistent_volume_claim(ns, label_selector=SELECTOR)
        calls += 4
        running += bool(pods.items) and all(
            p.status is not None and p.status.phase == "Running" for p in pods.items
        )
        done += 1
        if time.perf_counter() - start > seconds:
            break
    elapsed = time.perf_counter() - start
    return {
        "apps": done,
        "seconds": elapsed,
        "calls": calls,
        "running": running,
        "rss_growth": rss_bytes() - rss_before,
        "rss": rss_bytes(),
        "rss_peak": rss_bytes(field="VmHWM"),
    }


def child_phases(kubeconfig: str, targets_file: str, out_file: str, rate: float) -> None:
    """An independent observer: watch managed pods, then end each target pod through kwok.

    Writes ``ready``, then ``patched <monotonic> <ns>/<pod>`` after each annotation and
    ``phase <monotonic> <ns>/<pod>`` when the watch shows the pod Failed (kwok's exit stage).
    CLOCK_MONOTONIC is one clock for every process of the machine.
    """
    from kubeadmin import admin_client  # noqa: PLC0415
    from kubernetes import client  # noqa: PLC0415

    with admin_client(kubeconfig) as api_client:
        watch_phases(client.CoreV1Api(api_client), targets_file, out_file, rate)


def watch_phases(api: CoreV1Api, targets_file: str, out_file: str, rate: float) -> None:
    """:func:`child_phases` with the admin's client."""
    from kubeadmin import unread  # noqa: PLC0415

    targets = [line.split("/") for line in Path(targets_file).read_text().split()]
    wanted = {f"{ns}/{pod}" for ns, pod in targets}
    out = Path(out_file).open("a", buffering=1)  # noqa: SIM115 - lives as long as the process
    lock = threading.Lock()

    def write(line: str) -> None:
        with lock:
            out.write(line + "\n")

    listed = json.loads(
        unread(
            api.list_pod_for_all_namespaces(
                label_selector=SELECTOR, limit=1, _preload_content=False
            )
        ).data
    )
    response = unread(
        api.list_pod_for_all_namespaces(
            label_selector=SELECTOR,
            watch=True,
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=900,
            _preload_content=False,
        )
    )

    def patch_all() -> None:
        for ns, pod in targets:
            body = {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "3"}}}
            api.patch_namespaced_pod(pod, ns, body)
            write(f"patched {time.monotonic()} {ns}/{pod}")
            time.sleep(1 / rate)

    write("ready")
    threading.Thread(target=patch_all, daemon=True).start()
    seen: set[str] = set()
    pending = b""
    for chunk in response.stream(65536):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            obj = json.loads(line)["object"]
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            phase = (obj.get("status") or {}).get("phase")
            if key in wanted and key not in seen and phase == "Failed":
                seen.add(key)
                write(f"phase {time.monotonic()} {key}")
        if seen == wanted:
            break


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kind", choices=("cold", "naive", "phases"))
    parser.add_argument("rest", nargs="+")
    parser.add_argument("--qps", type=float, default=1000.0)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))  # the admin client
    rest = args.rest
    if args.kind == "cold":
        print(json.dumps(child_cold(rest[0], int(rest[1]), args)))
    elif args.kind == "naive":
        print(json.dumps(child_naive(rest[0], int(rest[1]), float(rest[2]))))
    else:
        child_phases(rest[0], rest[1], rest[2], float(rest[3]))
        print("{}")


if __name__ == "__main__":
    main()
