"""What the network tests do inside containers: a web page, an HTTP GET through ``nc``."""

from __future__ import annotations

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
