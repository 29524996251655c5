"""What the network tests do inside containers: a web page, an HTTP GET through ``nc``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
from _docker_harness import BUSYBOX, DockerHarness
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

SLEEP = ("sh", "-c", "trap 'exit 143' TERM; while :; do sleep 0.2; done")
PAGE = "pando-web"
SERVE = (
    "sh",
    "-c",
    f"mkdir -p /www && echo {PAGE} > /www/index.html && exec httpd -f -p 8080 -h /www",
)
STAND_IN = "pando stand-in outside"
"""What every stand-in of the outside world answers."""


def workload(name: str, command: tuple[str, ...] = SLEEP) -> pr.WorkloadPlan:
    return pr.WorkloadPlan(name=name, image=BUSYBOX, command=command)


async def running(adapter: DockerAdapter, *plans: pr.BundlePlan) -> None:
    for plan in plans:
        await adapter.apply(plan)
    with anyio.fail_after(60):
        for plan in plans:
            while True:
                observed = await adapter.observe(pr.BundleRef(plan.bundle_id))
                if observed.workloads and observed.all_running:
                    break
                await anyio.sleep(0.1)


def probe(address: str, port: int = 80, timeout: int = 3) -> tuple[str, ...]:
    """``sh -c`` an HTTP GET through ``nc`` (busybox's wget crashes here)."""
    request = r"GET / HTTP/1.0\r\nHost: %s\r\n\r\n" % address  # noqa: UP031 - printf's own %
    return ("sh", "-c", f"printf '{request}' | nc -w {timeout} {address} {port}")


async def fetch(harness: DockerHarness, container: str, address: str, port: int = 80) -> str:
    """What ``container`` gets back from ``address:port`` (empty: nothing answered)."""
    return await harness.docker("exec", container, *probe(address, port), check=False)


def answered(output: str, page: str) -> bool:
    return output.startswith("HTTP/1.") and page in output


async def address_on(harness: DockerHarness, adapter: DockerAdapter, bundle: str, name: str) -> str:
    data = await harness.inspect(adapter.naming.container_name(bundle, name))
    networks = data["NetworkSettings"]["Networks"]
    return str(networks[adapter.naming.network_name(bundle)]["IPAddress"])


def proxied(url: str, proxy: str = "egress.gateway:3128", timeout: int = 5) -> tuple[str, ...]:
    """``sh -c`` a GET of ``url`` through the HTTP proxy at ``proxy``.

    Busybox ``nc`` closes the connection when its stdin ends, and Squid then drops the
    request: the request's writer stays open for ``timeout`` seconds (the proxy closes the
    connection after its answer, so nothing waits longer).
    """
    host, port = proxy.rsplit(":", 1)
    request = r"GET %s HTTP/1.0\r\n\r\n" % url  # noqa: UP031 - printf's own %
    writer = f"{{ printf '{request}'; sleep {timeout}; }}"
    return ("sh", "-c", f"{writer} | nc -w {timeout} {host} {port}")


async def fetch_through(harness: DockerHarness, container: str, url: str) -> str:
    """What ``container`` gets back for ``url`` through its bundle's gateway."""
    return await harness.docker("exec", container, *proxied(url), check=False)


@contextlib.contextmanager
def loopback_resolver(engine: Any, work_dir: Path) -> Iterator[Path]:
    """The daemon's resolver on loopback, as on hosts with a local caching resolver.

    A stand-in DNS server (``localdocker.dns``) listens on 127.0.0.1:53 in the engine's own
    namespace and logs every question to the file yielded; the daemon's ``resolv.conf`` (a
    file bound into its mount namespace, rewritten in place so the bind sees it) names it
    for the block, and its own text comes back afterwards. Containers made in the block
    get it; the engine itself is not restarted.
    """
    from localcluster.realnode import netns  # noqa: PLC0415 - only with the harness
    from localdocker.outside import SUPPORT_DIR  # noqa: PLC0415

    log = work_dir / "loopback-queries.jsonl"
    ready = work_dir / "loopback.ready"
    config = work_dir / "loopback-dns.json"
    config.write_text(
        json.dumps(
            {
                "listen": "127.0.0.1",
                "port": 53,
                "hosts": dict(engine.outside.names),
                "log": str(log),
                "ready_file": str(ready),
            }
        )
    )
    argv = netns.command(engine.netns, [sys.executable, "-m", "localdocker.dns", str(config)])
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_DIR)}
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    resolv = engine.files.resolv_conf
    saved = resolv.read_text()
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the loopback DNS server did not start: {server.stderr}")
            time.sleep(0.05)
        resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        yield log
    finally:
        resolv.write_text(saved)
        server.terminate()
        server.wait(timeout=10)


def logged_names(log: Path) -> set[str]:
    """The names a stand-in DNS server's log holds."""
    from localdocker.dns import read_log  # noqa: PLC0415 - only with the harness

    return {entry["name"] for entry in read_log(log)}


async def lookup_on_a_new_network(harness: DockerHarness, name: str, *, internal: bool) -> None:
    """Look ``name`` up from a container on a network made for it (then removed)."""
    network = f"pando-lookup-{uuid.uuid4().hex[:8]}"
    await harness.docker("network", "create", *(["--internal"] if internal else []), network)
    try:
        await harness.docker(
            "run", "--rm", "--pull", "never", "--network", network, BUSYBOX,
            "nslookup", name, check=False,
        )  # fmt: skip
    finally:
        await harness.docker("network", "rm", network, check=False)


def leaks_internal_lookups(engine: Any) -> bool:
    """Whether the engine forwards an internal network's lookups from the daemon's namespace
    when its resolver is on loopback (CVE-2024-29018: fixed in 23.0.11, 25.0.5 and 26.0;
    20.10 leaks, 28.5 does not)."""
    text = str(engine.api.version()["Version"])
    release = tuple(int(part) for part in re.findall(r"\d+", text)[:3])
    fixed = release >= (26,) or (25, 0, 5) <= release < (25, 1) or (23, 0, 11) <= release < (24,)
    return not fixed


async def wait_logged(log: Path, name: str) -> None:
    """Until the stand-in DNS server's log holds ``name``."""
    with anyio.fail_after(30):
        while name not in logged_names(log):  # noqa: ASYNC110 - polls the log
            await anyio.sleep(0.1)


HOST_PAGE = "pando host service"


@contextlib.contextmanager
def host_service(engine: Any) -> Iterator[int]:
    """A TCP service in the daemon's own namespace (every address there), answering
    :data:`HOST_PAGE` to each connection; yields its port."""
    with engine.entered():
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))  # noqa: S104 - inside the engine's namespace only
    server.listen()
    server.settimeout(0.1)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(f"HTTP/1.0 200 OK\r\n\r\n{HOST_PAGE}\n".encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        done.set()
        thread.join(timeout=10)
        server.close()
