"""Helpers of the real-node tests: plans of the harness's busybox image, waits, and sockets
opened inside the real node's namespaces (what a node or the outside world would send)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import pytest
from localcluster import images

from pando_runtime import BundleRef, ObservedBundle, RuntimeAdapter, WorkloadPlan

MARKS = [
    pytest.mark.kube,
    pytest.mark.real_node,
    pytest.mark.anyio,
    # asyncio only: trio runs the same adapter code against kwok's nodes.
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
]
"""Every real-node test module's ``pytestmark``."""

IMAGE = images.WORKLOAD
"""The harness's busybox image, loaded on the real node (sh, nc, wget, httpd, nslookup...)."""


def new_id(prefix: str) -> str:
    """A bundle id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def sh(name: str, script: str, **kwargs: Any) -> WorkloadPlan:
    """A workload of the busybox image running ``script`` with ``sh -c``."""
    return WorkloadPlan(name=name, image=IMAGE, entrypoint=("sh", "-c", script), **kwargs)


def serve(name: str, port: int, **kwargs: Any) -> WorkloadPlan:
    """A workload serving ``ok-<name>`` over HTTP on ``port``."""
    page = f"mkdir -p /tmp/w && echo ok-{name} > /tmp/w/index.html"
    script = f"{page} && exec httpd -f -p {port} -h /tmp/w"
    return sh(name, script, **kwargs)


async def wait_for(
    adapter: RuntimeAdapter,
    bundle_id: str,
    check: Callable[[ObservedBundle], bool],
    *,
    timeout: float = 60.0,  # noqa: ASYNC109 - a deadline for the whole poll, not one call
) -> ObservedBundle:
    """Observe until ``check`` holds; the last observation is in the failure otherwise."""
    observed = await adapter.observe(BundleRef(bundle_id))
    with anyio.move_on_after(timeout):
        while not check(observed):
            await anyio.sleep(0.5)
            observed = await adapter.observe(BundleRef(bundle_id))
    assert check(observed), f"{bundle_id} never reached the state: {observed}"
    return observed


async def connects_from_async(netns_name: str, host: str, port: int) -> bytes | None:
    """What a TCP connection from ``netns_name`` to ``host:port`` reads after an HTTP GET
    (None when refused or timed out), in a worker thread (see ``netns.connects_from``)."""
    from localcluster.realnode import netns  # noqa: PLC0415

    return await anyio.to_thread.run_sync(netns.connects_from, netns_name, host, port)
