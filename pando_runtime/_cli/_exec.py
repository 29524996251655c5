"""Interactive exec for the CLI: a local terminal wired to a session with a TTY."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import termios
import tty
from collections.abc import Iterator

import anyio
from anyio.abc import ByteReceiveStream

from .._adapter._abc import RuntimeAdapter
from .._contract._exec import ExecRequest, ExecSession
from .._contract._refs import WorkloadRef

__all__ = ["interactive_exec"]


@contextlib.contextmanager
def _raw_terminal(fd: int) -> Iterator[None]:
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _pump_out(stream: ByteReceiveStream, fd: int) -> None:
    async for chunk in stream:
        await anyio.to_thread.run_sync(os.write, fd, chunk)


async def _pump_in(session: ExecSession, fd: int) -> None:
    if session.stdin is None:
        return
    while True:
        # Abandoned on cancel: a thread blocked on a terminal read ends with the process.
        data = await anyio.to_thread.run_sync(os.read, fd, 4096, abandon_on_cancel=True)
        if not data:
            await session.stdin.aclose()
            return
        await session.stdin.send(data)


async def _resizes(session: ExecSession) -> None:
    size = shutil.get_terminal_size()
    await session.resize(size.lines, size.columns)
    with anyio.open_signal_receiver(signal.SIGWINCH) as signals:
        async for _ in signals:
            size = shutil.get_terminal_size()
            await session.resize(size.lines, size.columns)


async def interactive_exec(
    adapter: RuntimeAdapter, ref: WorkloadRef, command: tuple[str, ...]
) -> int:
    """Run ``command`` with a TTY, this terminal in raw mode; returns its exit code."""
    request = ExecRequest(
        command=command, tty=True, stdin=True, env={"TERM": os.environ.get("TERM", "xterm")}
    )
    stdin_fd, stdout_fd = sys.stdin.fileno(), sys.stdout.fileno()
    async with adapter.exec(ref, request) as session:
        with _raw_terminal(stdin_fd):
            async with anyio.create_task_group() as group:
                group.start_soon(_pump_in, session, stdin_fd)
                group.start_soon(_resizes, session)
                await _pump_out(session.stdout, stdout_fd)
                group.cancel_scope.cancel()
        code = await session.wait()
    return 1 if code is None else code
