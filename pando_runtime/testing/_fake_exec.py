"""Scripted exec for the fake adapter: handlers that play a command."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeAlias

import anyio
import attrs
from anyio.abc import ByteReceiveStream, ByteSendStream

from .._contract._exec import ExecSession
from .._contract._refs import WorkloadRef
from .._contract._streams import (
    MemoryByteReceiveStream,
    MemoryByteSendStream,
    byte_stream_pair,
    read_all,
)

__all__ = ["ExecContext", "ExecHandler", "FakeExecSession", "scripted"]


@attrs.define
class ExecContext:
    """What an exec handler sees: the command, and the streams to play it on.

    The handler reads ``stdin`` (empty unless the request asked for stdin),
    writes ``stdout``/``stderr`` and returns the exit code (``None`` for
    unknown). ``resizes`` records each terminal size the host sent.
    """

    ref: WorkloadRef
    command: tuple[str, ...]
    env: Mapping[str, str]
    tty: bool
    stdin: ByteReceiveStream
    stdout: ByteSendStream
    stderr: ByteSendStream
    resizes: list[tuple[int, int]] = attrs.field(factory=list)

    async def read_stdin(self) -> bytes:
        """All of stdin, up to end-of-file."""
        return await read_all(self.stdin)


ExecHandler: TypeAlias = Callable[[ExecContext], Awaitable[int | None]]


def scripted(stdout: bytes = b"", stderr: bytes = b"", exit_code: int | None = 0) -> ExecHandler:
    """A handler that prints fixed output and exits with ``exit_code``."""

    async def handler(context: ExecContext) -> int | None:
        if stdout:
            await context.stdout.send(stdout)
        if stderr:
            await context.stderr.send(stderr)
        return exit_code

    return handler


async def command_not_found(context: ExecContext) -> int:
    """What runs when no handler matches: a shell's 'command not found', saying why."""
    # A person trying the fake from the command line meets this first: say what it runs.
    await context.stderr.send(
        f"fake: {context.command[0]}: command not found (the fake adapter runs no real "
        "commands, only those a test scripted with FakeAdapter.on_exec)\n".encode()
    )
    return 127


class FakeExecSession(ExecSession):
    """A session whose command is played by a handler in a background task."""

    def __init__(self, context_args: dict[str, object], *, want_stdin: bool) -> None:
        stdin_send, stdin_receive = byte_stream_pair()
        stdout_send, stdout_receive = byte_stream_pair()
        stderr_send, stderr_receive = byte_stream_pair()
        self.stdin: MemoryByteSendStream | None = stdin_send if want_stdin else None
        self.stdout: MemoryByteReceiveStream = stdout_receive
        self.stderr: MemoryByteReceiveStream = stderr_receive
        self._stdin_send = stdin_send
        self._outputs = (stdout_send, stderr_send)
        self.context = ExecContext(
            stdin=stdin_receive,
            stdout=stdout_send,
            stderr=stderr_send,
            **context_args,  # type: ignore[arg-type]
        )
        self._done = anyio.Event()
        self._exit_code: int | None = None

    async def play(self, handler: ExecHandler) -> None:
        """Run ``handler`` to its end; then the output streams end."""
        if self.stdin is None:
            await self._stdin_send.aclose()
        try:
            self._exit_code = await handler(self.context)
        finally:
            for stream in self._outputs:
                await stream.aclose()
            self._done.set()

    async def resize(self, rows: int, columns: int) -> None:
        self.context.resizes.append((rows, columns))
        await anyio.lowlevel.checkpoint()

    async def wait(self) -> int | None:
        await self._done.wait()
        return self._exit_code

    async def aclose(self) -> None:
        if self.stdin is not None:
            await self.stdin.aclose()


def new_session(
    ref: WorkloadRef,
    command: tuple[str, ...],
    env: Mapping[str, str],
    *,
    tty: bool,
    want_stdin: bool,
) -> FakeExecSession:
    """A session ready for :meth:`FakeExecSession.play`."""
    return FakeExecSession(
        {"ref": ref, "command": command, "env": env, "tty": tty}, want_stdin=want_stdin
    )
