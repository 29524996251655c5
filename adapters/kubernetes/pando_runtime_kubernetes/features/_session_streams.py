"""A session's streams: exec sessions in pods, and logs; API errors become the contract's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream

from pando_runtime import ExecRequest, ExecSession, NotFound

from ..api._errors import ApiError
from ..api._paths import api_path
from ..api._transport import KubeTransport, ResponseStream
from ._session_errors import ClusterErrors

__all__ = ["SessionStreams"]


class SessionStreams:
    """Exec and log streams of one cluster, over the session's transport."""

    def __init__(
        self,
        transport: Callable[[], Awaitable[KubeTransport]],
        errors: ClusterErrors,
        read_timeout: float,
    ) -> None:
        self._transport = transport
        self._errors = errors
        self._read_timeout = read_timeout

    @contextlib.asynccontextmanager
    async def exec(
        self, ns: str, pod: str, container: str | None, request: ExecRequest
    ) -> AsyncIterator[ExecSession]:
        """An exec session in a pod; API errors become the contract's errors."""
        api = await self._transport()
        try:
            async with api.exec(ns, pod, container, request) as session:
                yield session
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                raise NotFound(f"pod {pod} is gone", details={"pod": pod}) from error
            raise self._errors.failed(error, f"exec in pod {pod}") from error

    async def exec_output(
        self, ns: str, pod: str, container: str, command: tuple[str, ...]
    ) -> tuple[int | None, bytes, bytes]:
        """Run ``command`` to its end: exit code, stdout, stderr."""
        outputs: dict[str, bytes] = {}
        async with self.exec(ns, pod, container, ExecRequest(command=command)) as session:

            async def collect(name: str, stream: ByteReceiveStream) -> None:
                outputs[name] = b"".join([chunk async for chunk in stream])

            async with anyio.create_task_group() as group:
                group.start_soon(collect, "out", session.stdout)
                group.start_soon(collect, "err", session.stderr)
            code = await session.wait()
        return code, outputs["out"], outputs["err"]

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, *, query: Mapping[str, Any], read_timeout: float
    ) -> AsyncIterator[ResponseStream]:
        """A streaming GET (a log); raises :class:`ApiError`, whose status the caller reads."""
        api = await self._transport()
        async with api.stream(path, query=query, read_timeout=read_timeout) as response:
            yield response

    async def read_log(self, ns: str, pod: str, container: str, limit: int) -> bytes:
        """The first ``limit`` bytes of a container's log.

        Raises :class:`AdapterUnavailable` (or :class:`RateLimited`) when it cannot be read.
        """
        parts: list[bytes] = []
        size = 0
        try:
            async with self.stream(
                api_path(ns, "pods", pod) + "/log",
                query={"container": container, "limitBytes": limit},
                read_timeout=self._read_timeout,
            ) as response:
                while size < limit and (chunk := await response.receive()):
                    parts.append(chunk)
                    size += len(chunk)
        except ApiError as error:
            raise self._errors.unavailable(error, f"read the log of {pod}") from error
        return b"".join(parts)[:limit]
