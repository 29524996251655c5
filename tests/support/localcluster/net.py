"""Loopback ports and polling helpers."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import TypeVar

T = TypeVar("T")

PORT_TRIES = 3
"""Starts on ports chosen anew when another process took a chosen one first."""

_handed_out: set[int] = set()
"""Every port this process has handed out: two clusters of one process never share one."""


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that are free on 127.0.0.1 right now.

    All sockets are held open until every port is chosen, so the ports are distinct; no port
    is handed out twice by one process (a stopped cluster keeps its ports for its restart, and
    a second cluster started meanwhile must not take them). Another process can still take
    one before the component binds it (a start then fails loudly).
    """
    with ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in _handed_out:
                ports.append(port)
        _handed_out.update(ports)
        return ports


def port_taken(output: str) -> bool:
    """Whether a component's output says a port it was given was taken before it bound it."""
    return "address already in use" in output.lower()


def retry_on_taken_port(
    attempt: Callable[[], T],
    *,
    reset: Callable[[], None],
    output: Callable[[Exception], str] = str,
    tries: int = PORT_TRIES,
) -> T:
    """Run ``attempt`` (choose ports, start, wait until ready) until it does not fail for a
    port taken meanwhile.

    :func:`free_ports` hands out ports free a moment ago; another process (a second test run
    on the machine) can bind one before the component does, and the component then exits
    saying so. ``reset`` undoes the failed attempt, and the next one chooses its ports anew.
    ``output`` tells what the failure said (the exception's text by default: make it hold
    the component's log). Any other failure, or the last try's, is raised as it is.
    """
    for attempt_number in range(1, tries + 1):
        try:
            return attempt()
        except Exception as failure:
            if attempt_number == tries or not port_taken(output(failure)):
                raise
            reset()
    raise AssertionError("unreachable: the last try returns or raises")


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
