"""A session's streams: exec sessions in pods, and logs; API errors become the contract's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream

from pando_runtime import ExecRequest, ExecSession, NotFound

from ..api._errors import ApiError
from ..api._paths import api_path
from ..api._transport import KubeTransport
from ._errors import ClusterErrors

__all__ = ["ChunkStream", "SessionStreams"]


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
        self,
        path: str,
        *,
        query: Mapping[str, Any],
        read_timeout: float,
        what: str,
        cut_is_end: bool = False,
    ) -> AsyncIterator[ChunkStream]:
        """A streaming GET (a log), failing only with the contract's errors.

        :class:`NotFound` when the object is gone; :class:`AdapterUnavailable` (or
        :class:`RateLimited`) for any other failure. ``cut_is_end``: a connection that ends
        with no answer (a timeout, a kubelet restart), while open or while opening, ends the
        stream quietly, as the server's own end would; the caller decides whether to reopen.
        """
        api = await self._transport()
        async with contextlib.AsyncExitStack() as stack:
            response: ChunkStream
            try:
                response = await stack.enter_async_context(
                    api.stream(path, query=query, read_timeout=read_timeout)
                )
            except ApiError as error:
                self._failed(error, path, what, cut_is_end=cut_is_end)
                response = _ENDED  # opened with no answer: ended before its first byte
            try:
                yield response
            except ApiError as error:  # from the stream's receive, in the caller's block
                self._failed(error, path, what, cut_is_end=cut_is_end)

    def _failed(self, error: ApiError, path: str, what: str, *, cut_is_end: bool) -> None:
        """Raise the contract's error for a failed stream, unless a cut is its end."""
        if error.status == HTTPStatus.NOT_FOUND:
            raise NotFound(f"cannot {what}: it is gone", details={"path": path}) from error
        if not (cut_is_end and error.status == 0):
            raise self._errors.unavailable(error, what) from error

    async def read_log(self, ns: str, pod: str, container: str, limit: int) -> bytes:
        """The first ``limit`` bytes of a container's log.

        Raises :class:`AdapterUnavailable` (or :class:`RateLimited`) when it cannot be read,
        the pod gone included (its log is unknown, not empty).
        """
        parts: list[bytes] = []
        size = 0
        what = f"read the log of {pod}"
        try:
            async with self.stream(
                api_path(ns, "pods", pod) + "/log",
                query={"container": container, "limitBytes": limit},
                read_timeout=self._read_timeout,
                what=what,
            ) as response:
                while size < limit and (chunk := await response.receive()):
                    parts.append(chunk)
                    size += len(chunk)
        except NotFound as gone:
            raise self._errors.down(
                f"cannot {what}: it is gone", status=HTTPStatus.NOT_FOUND
            ) from gone
        return b"".join(parts)[:limit]


class ChunkStream(Protocol):
    """What :meth:`SessionStreams.stream` yields: chunks, ``b""`` at the end."""

    async def receive(self) -> bytes:
        """The next chunk; ``b""`` at the end of the stream."""
        ...


class _Ended:
    """A stream that has ended before its first byte."""

    async def receive(self) -> bytes:
        return b""


_ENDED = _Ended()
