"""Exec sessions over the API server's exec stream (a WebSocket, ``v5.channel.k8s.io``).

Each session gets a fresh ``ApiClient``: ``kubernetes.stream.stream()`` swaps
the client's ``call_api`` while it opens the socket, so a shared client would
break concurrent calls (kubernetes-client/python#928). One worker thread per
session pumps the socket: it writes what the host sends on stdin (queued,
since the socket is not thread-safe), reads stdout and stderr apart into
memory streams, and keeps the error channel, which carries the exit status.
An empty error channel means the exit is unknown: ``wait()`` returns ``None``,
never a guessed 0. Closing the session sets a flag the pump checks at least
every 0.2 s, so no thread outlives its session.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import select
import ssl
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.abc import ByteSendStream
from anyio.streams.memory import MemoryObjectSendStream
from kubernetes.client import ApiClient, Configuration, CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream as ws_stream
from kubernetes.stream.ws_client import V5_CHANNEL_PROTOCOL
from websocket import ABNF, WebSocketException

from pando_runtime import ExecRequest, ExecSession
from pando_runtime.plugin import MemoryByteReceiveStream

from ._errors import ApiError

__all__ = ["KubeExecSession", "exit_code_of", "open_exec", "with_env"]

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE_CHANNEL = 0, 1, 2, 3, 4, 255
_POLL = 0.2
_HANDSHAKE = re.compile(r"Handshake status (\d{3})")
_GO_EXIT = re.compile(r"exit status (\d+)$")


def with_env(command: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``env K=V ... command``: the environment reaches the command only, never the pod."""
    if not env:
        return list(command)
    return ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *command]


def exit_code_of(error_channel: bytes) -> int | None:  # noqa: PLR0911 - one case a return
    """The exit code the error channel reports; ``None`` when it says nothing usable."""
    text = error_channel.strip()
    if not text:
        return None
    try:
        status = json.loads(text)
    except ValueError:
        return None
    if not isinstance(status, dict):
        return None
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or ()
    for cause in causes:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message"))
            except (TypeError, ValueError):
                return None
    # Some runtimes (kwok's local exec among them) report a non-zero exit only as Go's
    # exec.ExitError text, "...: exit status N", in an internal error: that is still the code.
    for message in [status.get("message") or "", *(c.get("message") or "" for c in causes)]:
        found = _GO_EXIT.search(str(message).strip())
        if found:
            return int(found.group(1))
    return None


class _Stdin(ByteSendStream):
    def __init__(self, session: KubeExecSession) -> None:
        self._session = session
        self._closed = False

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if item:
            self._session.commands.put((STDIN, bytes(item)))
        await anyio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._session.commands.put((-1, b""))  # close stdin (end-of-file)
        await anyio.lowlevel.checkpoint()


class KubeExecSession(ExecSession):
    """One command running in a container, pumped by one worker thread."""

    def __init__(self, client: Any, *, want_stdin: bool, limiter: anyio.CapacityLimiter) -> None:
        self._ws = client
        self._limiter = limiter
        self.commands: queue.SimpleQueue[tuple[int, bytes]] = queue.SimpleQueue()
        self._stop = threading.Event()
        out_send, out_receive = anyio.create_memory_object_stream[bytes](64)
        err_send, err_receive = anyio.create_memory_object_stream[bytes](1024)
        self._out: MemoryObjectSendStream[bytes] = out_send
        self._err: MemoryObjectSendStream[bytes] = err_send
        self.stdout = MemoryByteReceiveStream(out_receive)
        self.stderr = MemoryByteReceiveStream(err_receive)
        self.stdin = _Stdin(self) if want_stdin else None
        self._error = b""
        self._done = anyio.Event()
        self.v5 = getattr(client, "subprotocol", None) == V5_CHANNEL_PROTOCOL

    # -- the worker thread ----------------------------------------------------------------

    def _forward(self, target: MemoryObjectSendStream[bytes], data: bytes) -> None:
        while not self._stop.is_set():
            try:
                anyio.from_thread.run(self._send_within, target, data)
            except TimeoutError:
                continue  # backpressure: the host has not read yet; check the stop flag
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # nobody reads this stream any more
            return

    @staticmethod
    async def _send_within(target: MemoryObjectSendStream[bytes], data: bytes) -> None:
        with anyio.fail_after(_POLL):
            await target.send(data)

    def _take(self, channel: int) -> bytes:
        channels: dict[int, Any] = self._ws._channels  # noqa: SLF001 - the client's buffers
        data = channels.pop(channel, b"")
        return data.encode() if isinstance(data, str) else bytes(data)

    def _frames(self, timeout: float) -> dict[int, list[bytes]]:  # noqa: C901 - one read loop
        """The frames available within ``timeout`` (at most a batch), by channel.

        ``WSClient.update`` appends every available frame to one bytes object per channel,
        which costs quadratic time when output streams in faster than it is taken (a
        32 MiB stdout took 11 s); frames are read here one by one, as a list.
        """
        ws = self._ws
        sock = getattr(ws, "sock", None)
        if sock is None:  # a client without a socket of its own (tests): use its buffers
            ws.update(timeout=timeout)
            return {c: [self._take(c)] for c in (STDOUT, STDERR, ERROR)}
        out: dict[int, list[bytes]] = {}
        if not sock.connected:
            ws._connected = False  # noqa: SLF001
            return out
        raw = sock.sock

        def ready(wait: float) -> bool:
            if isinstance(raw, ssl.SSLSocket) and raw.pending():
                return True
            readable, _, _ = select.select((raw,), (), (), wait)
            return bool(readable)

        if not ready(timeout):
            return out
        for _ in range(256):
            try:
                opcode, frame = sock.recv_data_frame(control_frame=True)
            except (WebSocketException, OSError):
                # Closed right after its last frames (the exit status among them, often):
                # keep what was read; raising here would drop it and the exit with it.
                ws._connected = False  # noqa: SLF001
                break
            if opcode == ABNF.OPCODE_CLOSE:
                ws._connected = False  # noqa: SLF001
                break
            data = bytes(frame.data or b"")
            if opcode in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) and len(data) > 1:
                channel = data[0]
                if channel != CLOSE_CHANNEL:  # a v5 close of one channel: nothing to keep
                    out.setdefault(channel, []).append(data[1:])
            if not ready(0):
                break
        return out

    def _drain(self, frames: dict[int, list[bytes]]) -> None:
        for channel, target in ((STDOUT, self._out), (STDERR, self._err)):
            data = b"".join(frames.get(channel, ()))
            if data:
                self._forward(target, data)
        self._error += b"".join(frames.get(ERROR, ()))

    def _commands(self) -> None:
        while True:
            try:
                channel, data = self.commands.get_nowait()
            except queue.Empty:
                return
            if channel == -1:
                self._ws.close_channel(STDIN)  # a no-op before v5: EOF cannot be sent then
            else:
                self._ws.write_channel(channel, data)

    def pump(self) -> None:
        """Run in a worker thread until the command ends or the session closes."""
        ws = self._ws
        try:
            while not self._stop.is_set() and ws.is_open():
                self._commands()
                self._drain(self._frames(_POLL))
        except Exception:  # noqa: BLE001, S110 - a broken socket ends the session; exit unknown
            pass
        finally:
            with contextlib.suppress(Exception):
                ws.close()
            for target in (self._out, self._err):
                with contextlib.suppress(Exception):
                    anyio.from_thread.run_sync(target.close)
            with contextlib.suppress(Exception):
                anyio.from_thread.run_sync(self._done.set)

    # -- the host's side ------------------------------------------------------------------

    async def resize(self, rows: int, columns: int) -> None:
        """Queue a terminal size change (channel 4)."""
        self.commands.put((RESIZE, json.dumps({"Width": columns, "Height": rows}).encode()))
        await anyio.lowlevel.checkpoint()

    async def wait(self) -> int | None:
        """The exit code once the command ended; ``None`` when the server did not say."""
        await self._done.wait()
        return exit_code_of(self._error)

    async def aclose(self) -> None:
        """Stop the pump (it ends within a poll interval) and close the streams."""
        self._stop.set()
        await self.stdout.aclose()
        await self.stderr.aclose()


def _connect(  # noqa: PLR0917 - run in a worker thread, which passes positionals
    configuration: Configuration,
    namespace: str,
    pod: str,
    container: str | None,
    command: list[str],
    request: ExecRequest,
) -> Any:
    client = ApiClient(configuration)  # fresh: stream() swaps its call_api while connecting
    try:
        kwargs: dict[str, Any] = {
            "command": command,
            "stdin": request.stdin,
            "stdout": True,
            "stderr": not request.tty,
            "tty": request.tty,
            "_preload_content": False,
            "binary": True,
        }
        if container:
            kwargs["container"] = container
        return ws_stream(
            CoreV1Api(client).connect_get_namespaced_pod_exec, pod, namespace, **kwargs
        )
    except ApiException as error:
        # The WebSocket client reports every failure as status 0; the handshake has the real one.
        reason = str(error.reason or error)
        found = _HANDSHAKE.search(reason)
        raise ApiError(int(found.group(1)) if found else 0, reason) from error
    finally:
        # The socket lives on in the WSClient; the client's own pool is not needed any more.
        client.close()  # type: ignore[no-untyped-call]


@contextlib.asynccontextmanager
async def open_exec(
    configuration: Configuration,
    namespace: str,
    pod: str,
    container: str | None,
    request: ExecRequest,
    *,
    limiter: anyio.CapacityLimiter,
) -> AsyncIterator[KubeExecSession]:
    """Open an exec session; leaving the block closes it and joins its thread."""
    command = with_env(request.command, request.env)
    client = await anyio.to_thread.run_sync(
        _connect, configuration, namespace, pod, container, command, request, limiter=limiter
    )
    session = KubeExecSession(client, want_stdin=request.stdin, limiter=limiter)
    async with anyio.create_task_group() as group:

        async def pump() -> None:
            await anyio.to_thread.run_sync(session.pump, limiter=limiter)

        group.start_soon(pump)
        try:
            yield session
        finally:
            with anyio.CancelScope(shield=True):
                await session.aclose()
