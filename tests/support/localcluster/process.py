"""One control-plane component: a child process with its own log file."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="localcluster-spawner")


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL us when the process that started us exits."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: rely on the normal teardown
        pass


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def pid_alive(pid: int, executable: str | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, if given, was started from ``executable``."""
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        if executable is not None:
            argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
            return argv0 == executable
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return True


def stop_pid(pid: int, executable: str, timeout: float = 5.0) -> None:
    """Stop a process that this process did not start (``down`` of a detached cluster).

    Only signals ``pid`` while it still runs ``executable``, so a reused pid is never hit.
    """
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not pid_alive(pid, executable):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and pid_alive(pid, executable):
            time.sleep(0.1)


class Component:
    """A named child process whose stdout and stderr go to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return None if self.proc is None else self.proc.pid

    def start(self, *, detach: bool = False) -> None:
        """Start the process in its own session (so a terminal's Ctrl-C does not reach it).

        Unless ``detach`` is true, the process is killed by the kernel if this Python process
        dies without tearing the cluster down (when started from the main thread).
        """
        preexec: Callable[[], None] | None = None
        # Linux sends the death signal when the starting *thread* ends: started from a worker
        # thread (a test restarting a control plane from async code), the process would die
        # with that thread. There, the atexit teardown alone stops it.
        main = threading.current_thread() is threading.main_thread()
        if not detach and main and sys.platform.startswith("linux"):
            preexec = _die_with_parent

        def spawn() -> subprocess.Popen[bytes]:
            with self.log_path.open("ab") as log:
                return subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                    preexec_fn=preexec,  # noqa: PLW1509 - only calls prctl(2)
                )

        # The kernel's parent-death signal follows the *thread* that forked: a component
        # restarted from a short-lived worker thread would be killed when that thread ends.
        # One spawner thread lives as long as this process.
        self.proc = _SPAWNER.submit(spawn).result()
        self.started_at = time.monotonic()

    def exit_code(self) -> int | None:
        """The exit code if the process has ended, else None (also None before start)."""
        return None if self.proc is None else self.proc.poll()

    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; waits for the exit."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def kill(self) -> None:
        """SIGKILL (a crash: no shutdown of its own) and wait for the exit."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.resume()  # a stopped process dies of SIGKILL too, but reap it promptly
        self.proc.kill()
        self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process hangs, its sockets stay open (a stuck server)."""
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)

    def tail(self, lines: int = 40) -> str:
        """The last lines of this component's log."""
        return tail(self.log_path, lines)
