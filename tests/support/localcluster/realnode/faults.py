"""Faults of a real node's own programs: kubelet or containerd taken down and brought back, and
what the container runtime itself says runs (its task list), read on the node.

A fault acts on one of the node's :class:`~localcluster.process.Component`\\ s: ``SIGKILL`` is a
crash (no shutdown of its own), ``SIGTERM`` a stop as a service manager does it. The component is
started again with the same command, configuration and state, and :func:`wait_healthy` polls its
own health check until it answers, so a test knows when the fault is over::

    with faults.down(node, "kubelet", signal.SIGKILL):
        ...  # kubelet is not running here
    # kubelet answers its health check again

What runs on the node is read from containerd itself, with ``ctr`` against the node's socket:
its containers of a pod (:func:`pod_containers`) and their tasks (:func:`tasks`); a test's
control kills a container's task the same way (:func:`kill_task`).
"""

from __future__ import annotations

import contextlib
import signal as signals
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..net import wait_until
from . import netns
from .stack import RealNode

__all__ = [
    "RESTARTABLE",
    "FaultError",
    "Task",
    "down",
    "heal",
    "healthy",
    "kill_task",
    "pod_containers",
    "restart",
    "runtime_answers",
    "start_again",
    "take_down",
    "tasks",
    "wait_healthy",
]

RESTARTABLE = ("containerd", "kubelet", "kube-proxy", "kube-router")
"""The node's programs a fault may take down (the relay is the harness's, not the node's)."""
POD_UID_LABEL = "io.kubernetes.pod.uid"
"""The label containerd's CRI plugin puts on a pod's containers, naming the pod."""
CTR_TIMEOUT = 20.0
"""Seconds one ``ctr`` call may take (it waits for a containerd that is starting)."""


class FaultError(RuntimeError):
    """A fault could not be made or undone (its program's log tail is in the message)."""


@dataclass(frozen=True)
class Task:
    """One container's task as containerd lists it: its main process and its status."""

    container_id: str
    pid: int
    status: str
    """``RUNNING``, ``STOPPED``, ``PAUSED``, ...: containerd's word."""


def _ctr(node: RealNode, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["ctr", "--address", str(node.dirs.containerd_socket), "--namespace", "k8s.io",
            "--connect-timeout", "2s", "--timeout", f"{CTR_TIMEOUT:.0f}s", *args]  # fmt: skip
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=CTR_TIMEOUT + 5
    )


def runtime_answers(node: RealNode) -> bool:
    """Whether the node's containerd answers on its socket (its version, from the daemon)."""
    try:
        proc = _ctr(node, "version")
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0 and "Server:" in proc.stdout


def tasks(node: RealNode) -> dict[str, Task]:
    """Every task of the node's containerd (the CRI's namespace), by container id.

    Raises :class:`FaultError` when containerd does not answer.
    """
    proc = _ctr(node, "tasks", "list")
    if proc.returncode != 0:
        raise FaultError(f"ctr tasks list: {proc.stderr.strip()}")
    found = {}
    for line in proc.stdout.splitlines()[1:]:  # TASK PID STATUS
        fields = line.split()
        if len(fields) == 3:
            found[fields[0]] = Task(fields[0], int(fields[1]), fields[2])
    return found


def pod_containers(node: RealNode, pod_uid: str) -> set[str]:
    """The ids of the containers containerd holds for one pod (its sandbox's among them), by
    the pod uid label the CRI puts on each.

    Raises :class:`FaultError` when containerd does not answer.
    """
    proc = _ctr(node, "containers", "list", "--quiet", f'labels."{POD_UID_LABEL}"=="{pod_uid}"')
    if proc.returncode != 0:
        raise FaultError(f"ctr containers list: {proc.stderr.strip()}")
    return set(proc.stdout.split())


def kill_task(node: RealNode, container_id: str) -> None:
    """SIGKILL a container's main process through containerd (a container that really dies)."""
    proc = _ctr(node, "tasks", "kill", "--signal", "SIGKILL", container_id)
    if proc.returncode != 0:
        raise FaultError(f"ctr tasks kill {container_id}: {proc.stderr.strip()}")


def _http_ok(netns_name: str, port: int, path: str) -> bool:
    """Whether ``GET http://127.0.0.1:port/path`` inside ``netns_name`` answers 200."""
    with netns.entered(netns_name):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(2.0)
        sock.connect(("127.0.0.1", port))
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
        status_line = sock.recv(64).split(b"\r\n", 1)[0]
        return status_line.startswith(b"HTTP/1.") and status_line.split()[1:2] == [b"200"]
    except OSError:
        return False
    finally:
        sock.close()


def healthy(node: RealNode, name: str) -> bool:
    """Whether program ``name`` of the node runs and answers its own health check."""
    component = node.components.get(name)
    if component is None or not component.running():
        return False
    ports = node.local_ports
    checks = {
        "containerd": lambda: runtime_answers(node),
        "kubelet": lambda: _http_ok(node.network.node, ports["kubelet"], "/healthz"),
        "kube-proxy": lambda: _http_ok(node.network.node, ports["proxy"], "/healthz"),
        "kube-router": lambda: _http_ok(node.network.node, ports["router"], "/healthz"),
    }
    return checks[name]()


def wait_healthy(node: RealNode, name: str, *, timeout: float = 120.0) -> None:
    """Poll :func:`healthy` until it holds; :class:`FaultError` with the log tail otherwise
    (at once if the program exits)."""
    component = node.components[name]

    def exited() -> str | None:
        code = component.exit_code()
        return None if code is None else f"{name} exited with code {code}"

    try:
        ok = wait_until(lambda: healthy(node, name), timeout=timeout, interval=0.2, abort=exited)
    except RuntimeError as error:
        raise FaultError(f"{error}\n{component.tail(30)}") from None
    if not ok:
        raise FaultError(
            f"{name} not healthy {timeout:.0f} s after its restart\n{component.tail(30)}"
        )


def take_down(node: RealNode, name: str, signal: int = signals.SIGKILL) -> None:
    """End program ``name`` of the node by ``signal`` (``SIGKILL``: a crash; ``SIGTERM``: a
    stop, waited for up to 30 s) and wait for its exit."""
    if name not in RESTARTABLE:
        raise FaultError(f"no fault for {name!r}: one of {', '.join(RESTARTABLE)}")
    component = node.components[name]
    if not component.running():
        raise FaultError(f"{name} is not running: {component.tail(10)}")
    if signal == signals.SIGKILL:
        component.kill()
    elif signal == signals.SIGTERM:
        component.stop(30.0)
    else:
        raise FaultError(f"a fault sends SIGKILL or SIGTERM, not {signals.Signals(signal).name}")


@contextlib.contextmanager
def down(
    node: RealNode, name: str, signal: int = signals.SIGKILL, *, timeout: float = 120.0
) -> Iterator[None]:
    """Program ``name`` ended by ``signal`` for the block, then started again with the same
    command and state; returns once it answers its health check.

    It is started again on every way out of the block, an error's included.
    """
    take_down(node, name, signal)
    try:
        yield
    finally:
        start_again(node, name)
        wait_healthy(node, name, timeout=timeout)


def start_again(node: RealNode, name: str) -> None:
    """Start program ``name`` again with the same command, configuration and state, without
    waiting (see :func:`wait_healthy`).

    Called from the main thread, the program is ended by the kernel if this process dies (as
    at its first start); from another thread only the harness's teardown ends it.
    """
    component = node.components[name]
    if component.running():
        raise FaultError(f"{name} is running: take it down first")
    component.start()


def heal(node: RealNode, *, timeout: float = 120.0) -> list[str]:
    """Start again every program of the node a fault left down (containerd first), and wait
    until each answers; returns their names. A test's teardown calls it on every path."""
    healed = [name for name in RESTARTABLE if not node.components[name].running()]
    for name in healed:
        start_again(node, name)
        wait_healthy(node, name, timeout=timeout)
    return healed


def restart(
    node: RealNode, name: str, signal: int = signals.SIGKILL, *, timeout: float = 120.0
) -> float:
    """End ``name`` by ``signal`` and start it again at once; the seconds until it answers."""
    began = time.monotonic()
    with down(node, name, signal, timeout=timeout):
        pass
    return time.monotonic() - began
