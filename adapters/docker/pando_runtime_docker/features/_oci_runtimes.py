"""Which OCI runtime each app container runs under, and the checks that it really does.

``oci_runtime`` is the runtime of every app container (unset: the daemon's default);
``sandbox_runtime``, when set, the one a plan (or trial) asking for the sandboxed class runs
under, the others staying on ``oci_runtime``. A runtime's class is read from its name by the
core's one rule (:func:`pando_runtime.plugin.runtime_sandbox`): gVisor (``runsc``, ``runsc-*``,
``gvisor*``) and Kata (``kata*``) sandbox the app behind a kernel of their own; any other runs
it on the host's kernel (a container). The adapter's own containers (edges,
gateways, the agent, helpers) run under the daemon's default: they are not apps.

Two checks. The health check asks the daemon which runtimes it has (``GET /info``) and refuses
a named one it lacks. After each create, the container's ``HostConfig.Runtime`` must be the
name asked for: an engine that accepts the field and ignores it (Podman's Docker API, a proxy
or plugin that rewrites the request) made something else, which is removed before the error.
What no API check can see is a runtime registered under a name that lies (``runsc`` pointing at
runc's binary): the daemon reports the name it was asked for.

gVisor with its own network stack (its default) cannot reach the daemon's embedded DNS
(``127.0.0.11`` is the sandbox's own loopback): a sandboxed workload does not resolve the
other workloads' names nor the egress gateway's. The health check says so in the log when the
sandbox runtime is registered without ``--network=host``, or as a containerd shim (whose
options the API does not show).
"""

from __future__ import annotations

import re
from typing import Any

from pando_runtime import AdapterFailed, IsolationClass, Problem
from pando_runtime.plugin import runtime_sandbox

from .._log import logger
from ..api import EngineError, EngineTransport

__all__ = ["OciRuntimes", "runtime_class", "runtime_problems"]

_LOG = logger("runtimes")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def runtime_class(name: str | None) -> IsolationClass:
    """The isolation class of an app run under runtime ``name`` (``None``: the default)."""
    return IsolationClass.SANDBOXED if runtime_sandbox(name) else IsolationClass.CONTAINER


def runtime_problems(oci_runtime: str | None, sandbox_runtime: str | None) -> list[Problem]:
    """What is wrong with the two settings, each problem at its path."""
    problems = [
        Problem(path, "a runtime name as the daemon lists it (letters, digits, '.', '_', '-')")
        for path, name in (("oci_runtime", oci_runtime), ("sandbox_runtime", sandbox_runtime))
        if name is not None and not _NAME.match(name)
    ]
    named = sandbox_runtime is not None and _NAME.match(sandbox_runtime)
    if named and runtime_class(sandbox_runtime) < IsolationClass.SANDBOXED:
        problems.append(
            Problem(
                "sandbox_runtime",
                f"{sandbox_runtime!r} is not a sandboxing runtime: gVisor's (runsc, "
                "runsc-*, gvisor*) or Kata's (kata*)",
                "not_a_sandbox",
            )
        )
    return problems


class OciRuntimes:
    """The runtimes the settings name, the class each gives, and the checks on the daemon."""

    def __init__(
        self, api: EngineTransport, oci_runtime: str | None, sandbox_runtime: str | None
    ) -> None:
        self._api = api
        self.default = oci_runtime
        self.sandbox = sandbox_runtime
        # Weakest first: a plan runs under the first whose class meets its floor.
        offered = [(runtime_class(oci_runtime), oci_runtime)]
        if sandbox_runtime is not None:
            offered.append((runtime_class(sandbox_runtime), sandbox_runtime))
        self._offered = sorted(offered, key=lambda pair: pair[0])

    @property
    def isolation_class(self) -> IsolationClass:
        """The strongest class an app can be run under."""
        return self._offered[-1][0]

    @property
    def sandboxes(self) -> bool:
        """Whether some app may run in a sandbox (whose insides the host cannot look at).

        Then port and write observation are off for every trial: one flag describes them all.
        """
        return self.isolation_class >= IsolationClass.SANDBOXED

    def for_isolation(self, floor: IsolationClass) -> str | None:
        """The runtime of an app asking for ``floor`` (``None``: the daemon's default).

        The floor was checked against :attr:`isolation_class` already.
        """
        return next((name for cls, name in self._offered if cls >= floor), self._offered[-1][1])

    async def check_listed(self) -> None:
        """Refuse a runtime the settings name that the daemon does not list."""
        named = [n for n in (self.default, self.sandbox) if n is not None]
        if not named:
            return
        info: dict[str, Any] = await self._api.get_json("/info")
        runtimes: dict[str, Any] = info.get("Runtimes") or {}
        listed = sorted(runtimes)
        absent = [name for name in named if name not in listed]
        if absent:
            raise AdapterFailed(
                f"the daemon has no OCI runtime {', '.join(map(repr, absent))}; it has "
                + ", ".join(listed),
                remedy="Register the runtime in the daemon ('runtimes' in daemon.json, or "
                "dockerd --add-runtime) and restart it, or name one it has in 'oci_runtime' / "
                "'sandbox_runtime'.",
                details={"missing": absent, "runtimes": listed},
            )
        for name in named:
            _warn_of_gvisor_network(name, runtimes.get(name) or {})

    async def verify(self, container_id: str, wanted: str | None, what: str) -> None:
        """Raise, the container removed, unless it was created under ``wanted``."""
        if wanted is None:
            return
        data = await self._api.get_json("/containers/{id}/json", args={"id": container_id})
        got = str((data.get("HostConfig") or {}).get("Runtime") or "")
        if got == wanted:
            return
        try:
            await self._api.remove_container(container_id)
        except EngineError:
            _LOG.warning("could not remove %s made under the wrong runtime", what)
        raise AdapterFailed(
            f"{what} was created under the OCI runtime {got or 'unknown'!r}, not {wanted!r}: "
            "the engine ignored the runtime asked for; the container was removed",
            remedy="Use a Docker Engine that honours HostConfig.Runtime (Podman's Docker API "
            "does not), and nothing between it and the adapter that rewrites requests.",
            details={"container": container_id, "runtime": got, "wanted": wanted},
        )


def _warn_of_gvisor_network(name: str, listed: dict[str, Any]) -> None:
    """Log when a gVisor runtime may run its own network stack (the embedded DNS unreachable)."""
    shim = listed.get("runtimeType")
    if runtime_sandbox(name) != "gvisor" and runtime_sandbox(shim) != "gvisor":
        return
    args = listed.get("runtimeArgs")
    if args is None and shim:  # a containerd shim: its flags are in a file the API does not show
        _LOG.warning(
            "runtime %s is gVisor's containerd shim %s: unless its configuration sets "
            "network=host, sandboxed workloads do not resolve names through the daemon's "
            "embedded DNS (the other workloads', the egress gateway's); they reach them by "
            "address (docs/docker.md)",
            name,
            shim,
        )
    elif not re.search(r"--network[= ]host", " ".join(args or ())):
        _LOG.warning(
            "runtime %s runs gVisor's own network stack: sandboxed workloads do not "
            "resolve names through the daemon's embedded DNS (the other workloads', "
            "the egress gateway's); they reach them by address (docs/docker.md)",
            name,
        )
