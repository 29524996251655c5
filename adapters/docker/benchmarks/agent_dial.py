"""Benchmark: what the agent costs a host, on the tests' Docker Engine.

    python adapters/docker/benchmarks/agent_dial.py [--rounds 200] [--megabytes 64]

Starts the tests' engine and the host's namespace (tests/support/localdocker; needs root and
``docker.io``), an adapter in ``upstream_mode: agent`` and one busybox ``httpd`` workload,
then prints:

- the adapter's open: the first (the agent's network and container made, its files
  written, started) and a second one (the agent kept, its files written again);
- one connection and a small GET (HTTP/1.0), ``--rounds`` times one after another, p50 / p99:
  through the agent from the host's namespace (``connect_upstream`` with ``dial``: TCP, TLS
  1.3 with client certificates, the first line and its answer, then the relay), beside the
  same GET straight to the container's address from the engine's namespace (``address``
  mode's way);
- a ``--megabytes`` MiB file read through each way, MiB/s;
- a renewal of the agent's certificate in place (issue and one archive upload), p50 of ten.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
from pando_runtime_docker import DockerAdapter

from pando_runtime import (
    BundlePlan,
    BundleRef,
    Upstream,
    WorkloadPlan,
    WorkloadRef,
    connect_upstream,
)

ROOT = Path(__file__).resolve().parents[3]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:.2f} ms, p99 {pct(values, 0.99) * 1000:.2f} ms"


async def get(upstream: Upstream, path: str = "/") -> int:
    """GET ``path`` through ``upstream``; the bytes read."""
    async with await connect_upstream(upstream) as stream:
        await stream.send(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        size = 0
        try:
            while True:
                size += len(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return size


def timed_gets(upstream: Upstream, rounds: int) -> Callable[[], Awaitable[list[float]]]:
    async def run() -> list[float]:
        await get(upstream)  # a first one, out of the figures
        seconds = []
        for _ in range(rounds):
            started = time.perf_counter()
            await get(upstream)
            seconds.append(time.perf_counter() - started)
        return seconds

    return run


def timed_big(upstream: Upstream) -> Callable[[], Awaitable[tuple[int, float]]]:
    async def run() -> tuple[int, float]:
        started = time.perf_counter()
        size = await get(upstream, "/big")
        return size, time.perf_counter() - started

    return run


async def serving(adapter: DockerAdapter, ref: WorkloadRef) -> bool:
    observed = await adapter.observe(BundleRef(ref.bundle_id))
    return adapter.address_of(ref) is not None and observed.all_running


async def bench(engine: Any, host: Any, rounds: int, megabytes: int) -> None:
    from localdocker import AGENT, agent_image, run_in  # noqa: PLC0415 - after the path

    engine.load_image(agent_image().archive)
    address = host.link(engine)
    owner = f"b{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as folder:
        settings = {
            "host": engine.base_url,
            "owner": owner,
            "upstream_mode": "agent",
            "agent_image": AGENT,
            "agent_address": address,
            "agent_ca_file": f"{folder}/ca.pem",
            "stop_timeout": 1,
        }
        script = (
            f"mkdir -p /www && echo hello > /www/index.html && dd if=/dev/zero of=/www/big "
            f"bs=1048576 count={megabytes} 2>/dev/null && exec httpd -f -p 8080 -h /www"
        )
        web = WorkloadPlan(name="web", image=engine.busybox, command=("sh", "-c", script))
        started = time.perf_counter()
        async with DockerAdapter(settings) as adapter:
            print(f"open, agent made: {time.perf_counter() - started:.2f} s")
        started = time.perf_counter()
        async with DockerAdapter(settings) as adapter:
            print(f"open, agent kept: {time.perf_counter() - started:.2f} s")
            await adapter.apply(BundlePlan(bundle_id="web", workloads=(web,)))
            ref = WorkloadRef("web", "web")
            with anyio.fail_after(60):
                while not await serving(adapter, ref):  # noqa: ASYNC110 - polls observe
                    await anyio.sleep(0.05)
            upstream = adapter.upstream(ref, 8080)
            direct = attrs.evolve(upstream, dial=None)
            with anyio.fail_after(60):  # running is not listening: wait for the big file too
                size = 0
                while size < megabytes * 1024**2:
                    try:
                        size, _ = await anyio.to_thread.run_sync(
                            run_in, engine.netns, timed_big(direct)
                        )
                    except OSError:  # not listening yet
                        await anyio.sleep(0.1)
            through = await anyio.to_thread.run_sync(host.run, timed_gets(upstream, rounds))
            straight = await anyio.to_thread.run_sync(
                run_in, engine.netns, timed_gets(direct, rounds)
            )
            print(f"connect and GET, {rounds} rounds: through the agent {ms(through)}")
            print(f"connect and GET, {rounds} rounds: straight to the container {ms(straight)}")
            for name, upstream_way, place in (
                ("through the agent", upstream, host.run),
                ("straight to the container", direct, lambda fn: run_in(engine.netns, fn)),
            ):
                size, seconds = await anyio.to_thread.run_sync(place, timed_big(upstream_way))
                print(f"{size / 1024**2:.0f} MiB {name}: {size / 1024**2 / seconds:.0f} MiB/s")
            assert adapter.agent is not None
            renewals = []
            for _ in range(10):
                started = time.perf_counter()
                await adapter.agent.renew()
                renewals.append(time.perf_counter() - started)
            print(f"renewal in place: p50 {statistics.median(renewals) * 1000:.1f} ms")
        engine.docker("rm", "-f", "-v", f"{owner}_agent", check=False)
        engine.reset()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--megabytes", type=int, default=64)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localdocker import DockerEngine, HostNamespace, missing  # noqa: PLC0415 - after the path

    if absent := missing():
        print("cannot start the tests' engine here: it lacks " + ", ".join(absent))
        return 1
    with tempfile.TemporaryDirectory(prefix="pando-agent-bench-") as work:
        host = HostNamespace().open()
        try:
            with DockerEngine(Path(work)) as engine:
                anyio.run(bench, engine, host, args.rounds, args.megabytes)
        finally:
            host.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
