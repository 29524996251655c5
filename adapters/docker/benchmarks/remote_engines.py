"""Benchmark: reaching the Docker engine over its unix socket, over TLS and over SSH.

Starts the tests' Docker Engine served over TLS too (``tests/support/localdocker``: dockerd
with ``--tlsverify`` on ``127.0.0.1:2376`` of its namespace) and Debian's sshd in the same
namespace; this process's main thread enters that namespace, so TLS and SSH are dialled
directly (no proxy in between) and ssh runs there too. For each way in, ``--rounds`` times:

* **set-up**: a new adapter to its first answer (``health_check``: the version's ``_ping``
  and one more): the socket's connect, or TCP and the TLS handshake, or ssh's connection,
  login and forwarding;
* **a call, kept connection**: ``GET /_ping`` on the adapter's pooled connection;
* **a call, new connection**: ``GET /_ping`` on a connection of its own, as each followed
  stream, log and exec opens one (a new TLS handshake; over SSH a new channel).

Prints the median of each (and the 90th percentile), one run. Needs root, Debian's
``docker.io`` and ``openssh-server``; says what is missing and exits 0 otherwise.

    python adapters/docker/benchmarks/remote_engines.py [--rounds 20] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:  # the test support packages join the path in main()
    from localdocker import DockerEngine
    from localdocker.sshd import EngineSshd

ROOT = Path(__file__).resolve().parents[3]


def ways_in(engine: DockerEngine, sshd: EngineSshd) -> dict[str, dict[str, Any]]:
    """The adapter's settings for each way in (from inside the engine's namespace)."""
    tls = engine.tls
    assert tls is not None
    return {
        "unix socket": {"host": engine.base_url},
        "TLS": {
            "host": f"tcp://127.0.0.1:{tls.port}",
            "tls_ca": str(tls.ca.cert),
            "tls_cert": str(tls.client.cert),
            "tls_key": str(tls.client.key),
        },
        "SSH": {
            "host": f"ssh://root@127.0.0.1:{sshd.port}",
            "ssh_host_key": sshd.host_public_key,
            "ssh_identity": str(sshd.client_key),
            "ssh_socket": str(engine.socket_path),
        },
    }


async def timed(action: Callable[[], Awaitable[object]], times: int) -> list[float]:
    """Seconds each of ``times`` runs of ``action`` took."""
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        await action()
        spent.append(time.perf_counter() - started)
    return spent


async def measure(settings: dict[str, Any], rounds: int, calls: int) -> dict[str, list[float]]:
    from pando_runtime_docker import DockerAdapter  # noqa: PLC0415 - the adapter under test

    async def set_up() -> None:
        adapter = DockerAdapter(settings)
        try:
            await adapter.health_check()
        finally:
            await adapter.aclose()

    figures = {"set-up": await timed(set_up, rounds)}
    adapter = DockerAdapter(settings)
    try:
        await adapter.health_check()
        transport = adapter.transport
        figures["call, kept connection"] = await timed(transport.ping, calls)

        async def fresh_connection() -> None:
            async with transport.stream("GET", "/_ping") as response:
                await response.aread()

        figures["call, new connection"] = await timed(fresh_connection, calls)
    finally:
        await adapter.aclose()
    return figures


def report(name: str, figures: dict[str, list[float]]) -> None:
    line = [f"  {name:12}"]
    for what, values in figures.items():
        median = statistics.median(values) * 1000
        p90 = statistics.quantiles(values, n=10)[-1] * 1000
        line.append(f"{what} {median:6.2f} ms (p90 {p90:6.2f})")
    print("  ".join(line))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=20, help="adapters set up per way in")
    parser.add_argument("--calls", type=int, default=200, help="calls timed per figure")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster.realnode import netns  # noqa: PLC0415 - after the path above
    from localdocker import DockerEngine, missing  # noqa: PLC0415
    from localdocker.sshd import EngineSshd  # noqa: PLC0415
    from localdocker.sshd import missing as sshd_missing  # noqa: PLC0415

    absent = missing() + sshd_missing()
    if absent:
        print(f"docker remote engines benchmark: skipped, this machine lacks {', '.join(absent)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="pando-docker-remote-") as work:
        engine = DockerEngine(Path(work) / "engine", tls=True)
        sshd: EngineSshd | None = None
        try:
            engine.open()
            sshd = EngineSshd(engine.netns, Path(work) / "sshd").open()
            print(
                f"docker adapter, ways in to one engine ({args.rounds} set-ups, {args.calls} "
                "calls each; medians, one run):"
            )
            with netns.entered(engine.netns):  # this thread's sockets, and ssh, dial from there
                for name, settings in ways_in(engine, sshd).items():
                    report(name, anyio.run(measure, settings, args.rounds, args.calls))
        finally:
            if sshd is not None:
                sshd.close()
            engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
