"""A workload's log and exec: the newest instance's container, through the API server.

The log of the newest pod is read, a finished one included. ``since`` is refined on the lines'
own timestamps (the API takes whole seconds), and a followed log that the server cuts is
reopened from the last line sent while the pod lives. Exec runs in the running instance.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream

from pando_runtime import ExecRequest, ExecSession, LogOptions, NotFound, WorkloadRef
from pando_runtime.plugin import IteratorByteStream, raise_problems, validate_exec_request

from .._info import KubernetesConfig
from .._names import namespace_for
from ..api._paths import api_path
from ..cache._projections import newest
from ..session._session import ClusterSession

__all__ = ["WorkloadIO", "timestamp_key"]

FOLLOW_READ_TIMEOUT = 300.0


def timestamp_key(stamp: bytes) -> tuple[bytes, bytes]:
    """An RFC 3339 nano timestamp as a sortable key (the server trims trailing zeros)."""
    head, _, fraction = stamp.rstrip(b"Z").partition(b".")
    return head, fraction.ljust(9, b"0")


class WorkloadIO:
    """``logs`` and ``exec`` of the workloads of one cluster."""

    def __init__(self, session: ClusterSession, config: KubernetesConfig) -> None:
        self._session = session
        self._config = config

    @contextlib.asynccontextmanager
    async def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> AsyncIterator[ByteReceiveStream]:
        """The latest instance's log; a followed log is reopened while the pod runs."""
        options = options or LogOptions()
        ns = namespace_for(ref.bundle_id)
        latest = newest(await self._session.reads.pods(ns), ref.workload)
        if latest is None:
            raise NotFound(
                f"workload {ref.workload!r} of {ref.bundle_id!r} has no instance",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        stream = IteratorByteStream(self._log_chunks(ns, latest.name, ref.workload, options))
        try:
            yield stream
        finally:
            await stream.aclose()

    async def _log_chunks(  # noqa: C901, PLR0912 - one loop: read, dedupe, reopen
        self, ns: str, pod: str, container: str, options: LogOptions
    ) -> AsyncIterator[bytes]:
        session = self._session
        query: dict[str, Any] = {"container": container, "timestamps": "true"}
        if options.tail is not None:
            query["tailLines"] = options.tail
        if options.since is not None:
            query["sinceTime"] = options.since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if options.follow:
            query["follow"] = "true"
        path = api_path(ns, "pods", pod) + "/log"
        last: tuple[bytes, bytes] | None = None
        reopened = False  # lines of a reopened follow up to the last one sent are dropped
        since: tuple[bytes, bytes] | None = None
        if options.since is not None:
            # The API takes whole seconds: lines of that second before ``since`` are dropped here.
            moment = options.since.astimezone(UTC)
            since = timestamp_key(f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond:06d}Z".encode())
        read_timeout = FOLLOW_READ_TIMEOUT if options.follow else self._config.read_timeout
        while True:
            try:
                async with session.streams.stream(
                    path,
                    query=query,
                    read_timeout=read_timeout,
                    what=f"read the log of {pod}",
                    cut_is_end=options.follow,
                ) as response:
                    pending = b""
                    while chunk := await response.receive():
                        pending += chunk
                        *lines, pending = pending.split(b"\n")
                        out = []
                        for line in lines:
                            stamp, _, text = line.partition(b" ")
                            stamp_key = timestamp_key(stamp)
                            if reopened and last is not None and stamp_key <= last:
                                continue  # already sent before the reopen
                            last = stamp_key
                            if since is not None and stamp_key < since:
                                continue
                            out.append(text + b"\n")
                        if out:
                            yield b"".join(out)
                    if pending:
                        yield pending.partition(b" ")[2]
            except NotFound as gone:
                raise NotFound(f"pod {pod} is gone", details={"pod": pod}) from gone
            if not options.follow:
                return
            # The server ended a followed log (a timeout, a kubelet restart): go on while the
            # pod lives, from the last line we sent.
            current = [p for p in await session.reads.pods(ns) if p.name == pod]
            if not current or not current[0].live:
                return
            await anyio.sleep(1.0)
            reopened = True
            query.pop("tailLines", None)
            if last is not None:
                query["sinceTime"] = last[0].decode() + "Z"

    @contextlib.asynccontextmanager
    async def exec(self, ref: WorkloadRef, request: ExecRequest) -> AsyncIterator[ExecSession]:
        """Run a command in the workload's running instance over the exec stream.

        ``request.env`` reaches the command through an ``env K=V ...`` prefix, never the pod.
        """
        raise_problems(validate_exec_request(request), "exec request")
        ns = namespace_for(ref.bundle_id)
        latest = newest(await self._session.reads.pods(ns), ref.workload)
        if latest is None or not latest.running:
            raise NotFound(
                f"workload {ref.workload!r} of {ref.bundle_id!r} has no running instance",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        async with self._session.streams.exec(ns, latest.name, ref.workload, request) as session:
            yield session
