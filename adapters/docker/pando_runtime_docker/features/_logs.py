"""Workload logs: the newest container's, demultiplexed, followed without a read timeout."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from anyio.abc import ByteReceiveStream

from pando_runtime import LogOptions, NotFound, WorkloadRef
from pando_runtime.plugin import IteratorByteStream

from ..api import EngineError, EngineTransport, FrameDecoder
from ..cache import ContainerCache

__all__ = ["open_logs"]


def newest_container(cache: ContainerCache, ref: WorkloadRef) -> str:
    """The id of the workload's newest container; ``NotFound`` when it has none."""
    view = cache.bundle(ref.bundle_id).newest().get(ref.workload)
    if view is None:
        raise NotFound(
            f"workload {ref.workload!r} of bundle {ref.bundle_id!r} has no instance",
            details={"bundle_id": ref.bundle_id, "workload": ref.workload},
        )
    return view.id


@contextlib.asynccontextmanager
async def open_logs(
    api: EngineTransport, cache: ContainerCache, ref: WorkloadRef, options: LogOptions
) -> AsyncIterator[ByteReceiveStream]:
    """The log of the workload's newest container (stdout and stderr, in order)."""
    container_id = newest_container(cache, ref)
    params: dict[str, object] = {
        "stdout": True,
        "stderr": True,
        "follow": options.follow,
        "tail": "all" if options.tail is None else options.tail,
    }
    if options.since is not None:
        params["since"] = f"{options.since.timestamp():.9f}"
    try:
        async with api.stream(
            "GET",
            "/containers/{id}/logs",
            args={"id": container_id},
            params=params,
            follow=options.follow,
        ) as response:
            stream = IteratorByteStream(_payload(response))
            try:
                yield stream
            finally:
                await stream.aclose()
    except EngineError as error:
        if error.not_found:
            raise NotFound(
                f"workload {ref.workload!r} of bundle {ref.bundle_id!r} has no instance",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            ) from None
        raise


async def _payload(response: httpx.Response) -> AsyncIterator[bytes]:
    # The adapter makes no TTY containers: the log is always multiplexed.
    decoder = FrameDecoder()
    async for raw in response.aiter_raw():
        for _, payload in decoder.feed(raw):
            yield payload
