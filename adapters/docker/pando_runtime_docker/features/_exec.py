"""Commands in a running workload over a hijacked connection: stdin, half-close, exit code."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
from anyio.abc import ByteSendStream, TaskGroup

from pando_runtime import ExecRequest, ExecSession, NotFound, WorkloadRef
from pando_runtime.plugin import MemoryByteSendStream, byte_stream_pair

from .._log import logger
from ..api import EngineError, EngineTransport, FrameDecoder, HijackedStream, StreamKind
from ..cache import ContainerCache
from ._logs import newest_container

__all__ = ["open_exec"]

_LOG = logger("exec")

_EXIT_POLLS = 50


class _Stdin(ByteSendStream):
    """The command's stdin; closing it half-closes the connection (end-of-file)."""

    def __init__(self, hijacked: HijackedStream) -> None:
        self._hijacked = hijacked

    async def send(self, item: bytes) -> None:
        if item:
            await self._hijacked.send(bytes(item))

    async def aclose(self) -> None:
        self._hijacked.close_write()


class DockerExecSession(ExecSession):
    """One exec instance: its output pumped into memory streams by a task of the session."""

    def __init__(
        self,
        api: EngineTransport,
        exec_id: str,
        hijacked: HijackedStream,
        request: ExecRequest,
        group: TaskGroup,
    ) -> None:
        self._api = api
        self._id = exec_id
        self._hijacked = hijacked
        self._tty = request.tty
        self.stdin = _Stdin(hijacked) if request.stdin else None
        out_send, self.stdout = byte_stream_pair()
        err_send, self.stderr = byte_stream_pair()
        self._done = anyio.Event()
        if not request.stdin:
            hijacked.close_write()
        group.start_soon(self._pump, out_send, err_send)

    async def _pump(self, out: MemoryByteSendStream, err: MemoryByteSendStream) -> None:
        decoder = FrameDecoder()
        try:
            async with out, err:
                while True:
                    chunk = await self._hijacked.receive()
                    if not chunk:
                        break
                    if self._tty:
                        await _send(out, chunk)
                        continue
                    for kind, payload in decoder.feed(chunk):
                        await _send(err if kind is StreamKind.STDERR else out, payload)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the session was closed while reading
        except Exception:  # noqa: BLE001 - a broken connection ends the output, as EOF does
            _LOG.debug("an exec session's connection broke")
        finally:
            self._done.set()

    async def resize(self, rows: int, columns: int) -> None:
        """Tell a TTY session its terminal's size."""
        await self._api.request(
            "POST", "/exec/{id}/resize", args={"id": self._id}, params={"h": rows, "w": columns}
        )

    async def wait(self) -> int | None:
        """Wait for the output to end, then read the exit code from the exec's inspect."""
        await self._done.wait()
        for _ in range(_EXIT_POLLS):
            data = await self._api.get_json("/exec/{id}/json", args={"id": self._id})
            if not data.get("Running"):
                code = data.get("ExitCode")
                return int(code) if code is not None else None
            await anyio.sleep(0.05)
        return None

    async def aclose(self) -> None:
        """Close the connection (ends the pump)."""
        await self._hijacked.aclose()


async def _send(stream: MemoryByteSendStream, payload: bytes) -> None:
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(payload)


@contextlib.asynccontextmanager
async def open_exec(
    api: EngineTransport, cache: ContainerCache, ref: WorkloadRef, request: ExecRequest
) -> AsyncIterator[ExecSession]:
    """An exec session in the workload's newest container (which must be running)."""
    container_id = newest_container(cache, ref)
    body = {
        "AttachStdin": request.stdin,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": request.tty,
        "Cmd": list(request.command),
        "Env": [f"{k}={v}" for k, v in sorted(request.env.items())],
    }
    try:
        created = await api.request(
            "POST", "/containers/{id}/exec", args={"id": container_id}, body=body
        )
    except EngineError as error:
        if error.not_found or error.conflict:
            raise NotFound(
                f"workload {ref.workload!r} of bundle {ref.bundle_id!r} is not running",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            ) from None
        raise
    exec_id = str(created.json()["Id"])
    hijacked = await api.upgrade(
        "/exec/{id}/start", args={"id": exec_id}, body={"Detach": False, "Tty": request.tty}
    )
    try:
        async with anyio.create_task_group() as group:
            session = DockerExecSession(api, exec_id, hijacked, request, group)
            try:
                yield session
            finally:
                await session.aclose()
    finally:
        await hijacked.aclose()
