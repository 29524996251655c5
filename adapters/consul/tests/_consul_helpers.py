"""Helpers shared by the Consul backend's test modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

import pando_runtime as pr


def registration(n: int, node: str, **fields: Any) -> pr.catalog.CatalogRegistration:
    """Registration number ``n`` on ``node`` (``svc-<n>``, ``10.0.x.y``, port 8000 + n)."""
    values: dict[str, Any] = {
        "service": f"svc-{n}",
        "service_id": f"svc-{n}:web:80",
        "address": f"10.0.{n // 256}.{n % 256}",
        "port": 8000 + n,
        "tags": ("web",),
        "metadata": {"pando-bundle": f"b{n}"},
        "node": node,
    }
    values.update(fields)
    return pr.catalog.CatalogRegistration(**values)


async def until(syncer: pr.catalog.CatalogSyncer, check: Callable[[], bool]) -> None:
    """Wait, pass by pass, until ``check()`` holds (a minute at most: a busy machine)."""
    with anyio.fail_after(60):
        while not check():
            await syncer.wait_pass()
