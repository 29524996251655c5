"""The administrator's calls of the cluster tests, made in a worker thread (the official client
blocks) so that the test's event loop and the adapter's watches keep running meanwhile."""

from __future__ import annotations

from typing import Any

import anyio.to_thread


async def core_call(admin_api: Any, fn: str, *args: Any, **kwargs: Any) -> Any:
    """``CoreV1Api(admin_api).<fn>(*args, **kwargs)``, as the typed client returns it."""
    from kubernetes import client  # noqa: PLC0415

    api = client.CoreV1Api(admin_api)
    return await anyio.to_thread.run_sync(lambda: getattr(api, fn)(*args, **kwargs))
