"""Network namespaces of the real nodes: made, entered and removed by the harness.

A namespace is made with ``ip netns add`` (so it is named under ``/run/netns`` and outlives
its processes until removed). Processes run in one through ``nsenter --net`` only: they keep
the host's mount namespace, so what kubelet mounts containerd sees (``ip netns exec`` would
give each process a mount namespace of its own). Python code makes a socket inside one with
:func:`entered`, which moves the calling thread alone (``setns`` is per thread); a socket
keeps the namespace it was made in (:func:`connects_from` opens one and reads an HTTP answer,
:func:`serving` listens in one). :func:`tcp_listeners` lists what listens in one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000


class NetnsError(RuntimeError):
    """A namespace could not be made, entered or removed."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def path(name: str) -> Path:
    """The file that names namespace ``name``."""
    return NETNS_DIR / name


def exists(name: str) -> bool:
    """Whether namespace ``name`` exists."""
    return path(name).exists()


def names(prefix: str) -> list[str]:
    """Every namespace whose name starts with ``prefix``."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    """Run ``ip ARGS`` (in ``netns`` when given) and return its output."""
    argv = ["ip", *(("-n", netns) if netns else ()), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc.stdout


def add(name: str) -> None:
    """Make namespace ``name`` with its loopback up."""
    ip("netns", "add", name)
    ip("link", "set", "lo", "up", netns=name)


def delete(name: str) -> None:
    """Kill every process left in ``name`` and remove it (no error when it is gone)."""
    if not exists(name):
        return
    for pid in pids(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    ip("netns", "delete", name, check=False)


def pids(name: str) -> list[int]:
    """The processes that run in namespace ``name``."""
    out = ip("netns", "pids", name, check=False)
    return [int(p) for p in out.split()]


def command(name: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run in namespace ``name`` (network only; see the module docstring)."""
    return ["nsenter", f"--net={path(name)}", "--", *argv]


def sysctl(name: str, key: str, value: str) -> None:
    """Set a per-namespace sysctl (``net.*``) inside namespace ``name``."""
    with entered(name):
        Path("/proc/sys", *key.split(".")).write_text(value)


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Move the calling thread into namespace ``name`` for the block, then back."""
    libc = _libc()
    with Path("/proc/thread-self/ns/net").open("rb") as home, path(name).open("rb") as target:
        if libc.setns(target.fileno(), _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(f"cannot enter network namespace {name}: {os.strerror(err)}")
        try:
            yield
        finally:
            if libc.setns(home.fileno(), _CLONE_NEWNET) != 0:  # pragma: no cover - fatal
                err = ctypes.get_errno()
                raise NetnsError(f"cannot leave network namespace {name}: {os.strerror(err)}")


def connects_from(name: str, host: str, port: int, timeout: float = 3.0) -> bytes | None:
    """What a TCP connection from namespace ``name`` to ``host:port`` reads after an HTTP GET.

    The socket is made inside the namespace (what a node, or the outside world, would send);
    the thread is back home before it connects.

    Args:
        name: the namespace.
        host: the address to connect to.
        port: its port.
        timeout: seconds for the connection and each read.

    Returns:
        The whole answer, or None when the connection is refused or times out.
    """
    with entered(name):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect((host, port))
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    except OSError:
        return None
    finally:
        sock.close()
    return data


@contextlib.contextmanager
def serving(name: str, reply: bytes, address: str = "0.0.0.0") -> Iterator[int]:  # noqa: S104
    """A TCP server in namespace ``name`` for the block, on ``address`` (every address of the
    namespace by default) and a free port, which it yields: it writes ``reply`` to each
    connection, one at a time, and ends it (a stand-in for whatever else listens on a node)."""
    with entered(name):
        server = socket.create_server((address, 0))
    server.settimeout(0.2)  # so the thread sees the block end
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2.0)
                conn.sendall(reply)
                conn.shutdown(socket.SHUT_WR)
                # Read until the client closes: closing with its request unread would reset
                # the connection, and the client would lose the reply.
                while conn.recv(4096):
                    pass

    thread = threading.Thread(target=answer, name=f"serving in {name}", daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        done.set()
        thread.join(5)
        server.close()


def tcp_listeners(name: str) -> list[tuple[str, int]]:
    """Every TCP socket listening in namespace ``name``, as (address, port): the address as
    ``ss`` prints it, without brackets or interface (``0.0.0.0``, ``::`` or ``*``: every
    address of the namespace)."""
    out = subprocess.run(
        command(name, ["ss", "-Hltn"]), capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        address, _, port = line.split()[3].rpartition(":")
        found.append((address.strip("[]").split("%", 1)[0], int(port)))
    return found
