"""Sandboxed apps: the RuntimeClass whose pods run under gVisor or Kata, read from the cluster.

A RuntimeClass names a handler of the nodes' container runtime; a handler that is gVisor
(``runsc``, ``runsc-*``, ``gvisor*``) or Kata (``kata*``), by the core's one rule
(:func:`pando_runtime.plugin.runtime_sandbox`), runs each pod in a sandbox of its own, so a cluster
offering one can run apps whose plan asks for ``IsolationClass.SANDBOXED``. The setting
``sandbox_runtime_class`` names the class to use; unset, the cluster's classes are listed and
the first (by name) with such a handler is used. Pods of ordinary plans keep
``runtime_class`` (or none); sandboxed ones get the sandbox's class.

What the API server can tell is checked: each pod is stored with the class it was given
(:meth:`SandboxClasses.admitted`). What it cannot: whether a node has the handler its class
names (a pod whose sandbox cannot be made waits in ``ContainerCreating``, the reason only in an
event), and what runs inside the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from pando_runtime import AdapterFailed, AdapterUnavailable, IsolationClass, RateLimited
from pando_runtime.plugin import runtime_sandbox

from .._info import KubernetesConfig
from .._log import logger
from ..api._paths import api_path
from ..manifests._workload_objects import PodSettings
from ..session._session import ClusterSession

__all__ = ["SandboxClasses"]

_LOG = logger("sandbox")
_CLASSES = api_path(None, "runtimeclasses", None, "node.k8s.io/v1")


class SandboxClasses:
    """Which RuntimeClass sandboxed pods get, read once from the cluster (again on health)."""

    def __init__(self, session: ClusterSession, config: KubernetesConfig) -> None:
        self._session = session
        self._config = config
        self._known: tuple[str | None] | None = None
        """``(class,)`` once read (``(None,)``: the cluster has none); ``None`` before."""
        self._lock = anyio.Lock()

    @property
    def name(self) -> str | None:
        """The sandbox's RuntimeClass as last read (no call); ``None`` when none or not read."""
        return self._known[0] if self._known else None

    def isolation(self) -> IsolationClass:
        """The strongest class an app runs under here, as last read (no call)."""
        return IsolationClass.SANDBOXED if self.name else IsolationClass.CONTAINER

    def pod_settings(self, isolation: IsolationClass) -> PodSettings:
        """Where a pod of a plan asking for ``isolation`` runs: the weakest class meeting it.

        Only a sandboxed plan gets the sandbox's class (the adapter refused it unless one is
        known); every other pod keeps ``runtime_class``.
        """
        c = self._config
        if isolation >= IsolationClass.SANDBOXED and self.name and self.name != c.runtime_class:
            return PodSettings(self.name, c.node_selector)
        return PodSettings(c.runtime_class, c.node_selector)

    async def look(self, *, strict: bool = False, fresh: bool = False) -> str | None:
        """Read the cluster's RuntimeClasses once (``fresh``: again); the sandbox's class.

        ``strict``: a failed read raises (the caller needs the answer); otherwise it leaves
        what was known (nothing, at first) and is tried again on the next call.
        """
        if self._known is not None and not fresh:
            return self._known[0]
        async with self._lock:  # concurrent first callers share one read
            if self._known is None or fresh:
                try:
                    self._known = (await self._read(),)
                except (AdapterUnavailable, RateLimited):
                    if strict:
                        raise
        return self.name

    async def _read(self) -> str | None:
        body = await self._session.api.get(_CLASSES, "list RuntimeClasses")
        handlers = {
            str(item["metadata"]["name"]): str(item.get("handler") or "")
            for item in body.get("items") or ()
        }
        named, every = self._config.sandbox_runtime_class, self._config.runtime_class
        extra = {"cluster": self._session.connection.log_name}
        if named is not None:
            if named not in handlers:
                _LOG.warning(
                    "RuntimeClass %r (sandbox_runtime_class) does not exist", named, extra=extra
                )
                return None
            chosen: str | None = named
        elif every is not None and runtime_sandbox(handlers.get(every)):
            chosen = every  # every app pod is sandboxed already
        else:
            chosen = next((n for n, h in sorted(handlers.items()) if runtime_sandbox(h)), None)
        if chosen is None:
            _LOG.info("no RuntimeClass runs gVisor or Kata: apps run in containers", extra=extra)
        else:
            _LOG.info(
                "RuntimeClass %r (handler %r) runs sandboxed apps",
                chosen,
                handlers[chosen],
                extra={**extra, "runtime_class": chosen, "handler": handlers[chosen]},
            )
        return chosen

    async def require(self) -> str:
        """The sandbox's class, read from the cluster now; ``AdapterUnavailable`` when absent.

        For the health check when ``sandbox_runtime_class`` is set.
        """
        found = await self.look(strict=True, fresh=True)
        if found is None:
            raise self._session.errors.down(
                f"RuntimeClass {self._config.sandbox_runtime_class!r} is not usable: "
                "it does not exist",
                remedy="Install the RuntimeClass or unset 'sandbox_runtime_class'.",
                status=404,
            )
        return found

    def admitted(self, pod: Mapping[str, Any], asked: PodSettings) -> None:
        """Raise when the API server stored a pod without the RuntimeClass it was given.

        An admission webhook may drop or change ``runtimeClassName``; a sandboxed plan must
        never run in an ordinary container because of it.
        """
        stored = (pod.get("spec") or {}).get("runtimeClassName")
        if asked.runtime_class and stored != asked.runtime_class:
            name = (pod.get("metadata") or {}).get("name")
            raise AdapterFailed(
                f"pod {name!r} was stored with RuntimeClass {stored!r}, "
                f"not {asked.runtime_class!r}: something on the API server changed it",
                remedy="Find the admission webhook that rewrites runtimeClassName and exempt "
                "the app namespaces from it.",
                details={"pod": name, "asked": asked.runtime_class, "stored": stored},
            )
