"""The host's side of engines on other machines: a namespace that reaches each engine at
one address and nothing behind it.

::

    host namespace ("<prefix>h")                    engine namespace ("<prefix>d<slot>")
    ----------------------------------------        ----------------------------------------
    e<slot>  198.19.<80+slot>.1/30   <- veth ->      h0  198.19.<80+slot>.2/30

No default route and no other route: from here an engine answers only at its end of the
link (where it publishes ports: the agent's, the edge's); its bridges, its containers and
its stand-in world are unreachable, as from a control-plane host on another machine. Code
runs inside with :meth:`HostNamespace.run` (a thread of its own, in the namespace, running
its own event loop: every socket it makes is the host's). The namespace is recorded
(:func:`.records.record_host`) before it is made, and removed by :meth:`close` or, after a
crash, by the next run's :func:`.records.clean_leftovers`; each link's engine end goes with
the engine's namespace.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from localcluster.realnode import netns

from . import records
from .engine import DockerEngine

T = TypeVar("T")


def run_in(namespace: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` to its end on a new thread inside ``namespace``, with its own event loop
    (asyncio): every socket it makes is that namespace's. Its result, or its exception
    raised here. Blocking: call it from async code through ``anyio.to_thread.run_sync``."""
    outcome: dict[str, Any] = {}

    def inside() -> None:
        try:
            with netns.entered(namespace):
                outcome["value"] = anyio.run(fn)
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            outcome["error"] = error

    thread = threading.Thread(target=inside, name=f"inside {namespace}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


class HostNamespace:
    """The host's namespace, linked to engines one by one (:meth:`link`)."""

    def __init__(self) -> None:
        self.name = f"pando-{os.getpid()}-h"
        self._links: dict[int, str] = {}
        self._open = False

    def open(self) -> HostNamespace:
        """Record and make the namespace (its loopback up, no route)."""
        records.clean_leftovers()
        records.record_host(self.name)
        netns.add(self.name)
        self._open = True
        return self

    def link(self, engine: DockerEngine) -> str:
        """Link the namespace to ``engine`` (once); the engine's address as the host sees it."""
        slot = engine.slot
        if slot not in self._links:
            host_ip, engine_ip = f"198.19.{80 + slot}.1", f"198.19.{80 + slot}.2"
            here = f"e{slot}"
            netns.ip("link", "add", here, "type", "veth", "peer", "name", "h0", "netns",
                     engine.netns, netns=self.name)  # fmt: skip
            netns.ip("addr", "add", f"{host_ip}/30", "dev", here, netns=self.name)
            netns.ip("addr", "add", f"{engine_ip}/30", "dev", "h0", netns=engine.netns)
            netns.ip("link", "set", here, "up", netns=self.name)
            netns.ip("link", "set", "h0", "up", netns=engine.netns)
            self._links[slot] = engine_ip
        return self._links[slot]

    def routes(self) -> str:
        """``ip route`` inside the namespace (what a test shows it cannot reach)."""
        return netns.ip("route", netns=self.name)

    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` inside the namespace (see :func:`run_in`)."""
        return run_in(self.name, fn)

    def close(self) -> None:
        """Remove the namespace and its record (idempotent)."""
        if self._open:
            records.undo_host(self.name)
            self._links.clear()
            self._open = False
