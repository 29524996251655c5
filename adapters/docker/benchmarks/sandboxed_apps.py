"""Benchmark: sandboxed apps (gVisor's runsc) against ordinary ones (runc) on one engine.

    python adapters/docker/benchmarks/sandboxed_apps.py [--apps 10] [--requests 500]

Starts one of the tests' engines (tests/support/localdocker: Debian's dockerd 20.10 in network
namespaces of its own, gVisor's ``runsc`` from ``$PANDO_GVISOR_BIN`` or tools/gvisor/build.sh
among its runtimes; needs root and ``docker.io``) and one adapter whose ``sandbox_runtime`` is
``runsc``. For each class, in the same run, ``--apps`` apps of one busybox httpd each:

- apply to running: seconds from ``apply`` until ``observe`` reads the app running, one app
  at a time (median and slowest);
- an HTTP request's latency, p50 and p99: ``--requests`` GETs of a small page, one connection
  each, from the engine's namespace (where the host dials in ``address`` mode) to one app;
- memory per app: the container's cgroup memory as the adapter's ``usage`` reports it, and
  the resident memory of the processes in that cgroup (gVisor's sandbox and gofer included).

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

import pando_runtime as pr

ROOT = Path(__file__).resolve().parents[3]
PAGE = "pando-bench"
SERVE = (
    "sh",
    "-c",
    f"mkdir -p /www && echo {PAGE} > /www/index.html && exec httpd -f -p 8080 -h /www",
)


def plan(bundle_id: str, image: str, isolation: pr.IsolationClass) -> pr.BundlePlan:
    web = pr.WorkloadPlan(name="web", image=image, command=SERVE, ports=(pr.Port(8080),))
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,), isolation=isolation)


async def to_running(adapter: Any, bundle: pr.BundlePlan) -> float:
    started = time.monotonic()
    await adapter.apply(bundle)
    while True:
        observed = await adapter.observe(pr.BundleRef(bundle.bundle_id))
        if observed.workloads and observed.all_running:
            return time.monotonic() - started
        await anyio.sleep(0.01)


def latencies(engine: Any, address: str, requests: int) -> list[float]:
    """Seconds of each GET, connect to the end of the answer (blocking: run in a thread)."""
    taken = []
    for _ in range(requests):
        started = time.monotonic()
        reply = b""
        with engine.connect(address, 8080) as sock:
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            while chunk := sock.recv(65536):
                reply += chunk
        taken.append(time.monotonic() - started)
        if PAGE.encode() not in reply:
            raise AssertionError(f"no page from {address}: {reply[:200]!r}")
    return taken


def cgroup_rss(engine: Any, container_id: str) -> int:
    """Resident bytes of every process in the container's memory cgroup (v1)."""
    procs = Path("/sys/fs/cgroup/memory") / engine.cgroup_parent.lstrip("/") / container_id
    total = 0
    for pid in (procs / "cgroup.procs").read_text().split():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure_class(
    adapter: Any, engine: Any, isolation: pr.IsolationClass, apps: int, requests: int
) -> dict[str, float]:
    label = isolation.name.lower()
    ids = [f"{label}-{i}" for i in range(apps)]
    seconds = [await to_running(adapter, plan(b, engine.busybox, isolation)) for b in ids]
    ref = pr.WorkloadRef(ids[0], "web")
    address = adapter.address_of(ref)
    await anyio.to_thread.run_sync(latencies, engine, address, 20)  # warm up
    taken = await anyio.to_thread.run_sync(latencies, engine, address, requests)
    cgroup, rss = [], []
    for bundle_id in ids:
        usage = await adapter.usage(pr.BundleRef(bundle_id))
        cgroup.append(usage.workloads[0].memory_bytes)
        view = adapter.cache.bundle(bundle_id).newest()["web"]
        rss.append(cgroup_rss(engine, view.id))
    for bundle_id in ids:
        await adapter.destroy(pr.BundleRef(bundle_id))
    return {
        "apply_median": statistics.median(seconds),
        "apply_max": max(seconds),
        "p50_ms": quantile(taken, 0.5) * 1000,
        "p99_ms": quantile(taken, 0.99) * 1000,
        "cgroup_mib": statistics.median(cgroup) / 1024**2,
        "rss_mib": statistics.median(rss) / 1024**2,
    }


async def measure(engine: Any, runsc: str, apps: int, requests: int) -> None:
    from pando_runtime_docker import DockerAdapter  # noqa: PLC0415

    settings = {
        "host": f"unix://{engine.socket_path}",
        "owner": f"bench{uuid.uuid4().hex[:6]}",
        "stop_timeout": 1,
        "sandbox_runtime": runsc,
    }
    async with DockerAdapter(settings) as adapter:
        await adapter.health_check()
        for isolation, runtime in (
            (pr.IsolationClass.CONTAINER, "runc"),
            (pr.IsolationClass.SANDBOXED, runsc),
        ):
            f = await measure_class(adapter, engine, isolation, apps, requests)
            print(
                f"  {runtime:5}: apply to running median {f['apply_median']:.2f} s (slowest "
                f"{f['apply_max']:.2f} s); HTTP p50 {f['p50_ms']:.2f} ms, p99 "
                f"{f['p99_ms']:.2f} ms; memory per app: cgroup {f['cgroup_mib']:.1f} MiB, "
                f"processes' RSS {f['rss_mib']:.1f} MiB"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--apps", type=int, default=10, help="apps of each class")
    parser.add_argument("--requests", type=int, default=500, help="GETs per class")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localdocker import DockerEngine, missing  # noqa: PLC0415 - after the path above
    from localdocker.gvisor import RUNSC, RUNSC_ARGS, runsc_binary  # noqa: PLC0415

    absent = missing()
    if absent:
        print(f"sandboxed apps benchmark: skipped, this machine lacks {', '.join(absent)}")
        return 0
    runtimes = {RUNSC: (runsc_binary(), RUNSC_ARGS)}
    with (
        tempfile.TemporaryDirectory(prefix="pando-sandbox-") as work,
        DockerEngine(Path(work), runtimes=runtimes) as engine,
    ):
        print(
            f"sandboxed apps: one engine (dockerd 20.10), runc against {RUNSC} (gVisor, its own "
            f"network stack), {args.apps} busybox httpd apps each, {args.requests} requests"
        )
        anyio.run(measure, engine, RUNSC, args.apps, args.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
