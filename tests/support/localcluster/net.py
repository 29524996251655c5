"""Loopback ports and polling helpers."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that are free on 127.0.0.1 right now.

    All sockets are held open until every port is chosen, so the ports are distinct; another
    process can still take one before the component binds it (a start then fails loudly).
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.1,
    abort: Callable[[], str | None] | None = None,
) -> bool:
    """Poll ``check`` until it returns true (-> True) or ``timeout`` seconds pass (-> False).

    ``abort`` is called between polls; a non-None result is raised as a ``RuntimeError``
    (used to stop waiting as soon as a component has died).
    """
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if abort is not None and (reason := abort()) is not None:
            raise RuntimeError(reason)
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
