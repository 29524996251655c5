"""Trial runs: an image run once, alone, and what it did (exit code, ports, writes, log).

The image runs in a container of its own on a bridge network of its own (nothing else is on
it and nothing is published, so nothing can connect to it; its outbound traffic is
unrestricted, as a bundle's without ``network.egress``). A helper that joins the container's
network namespace (``NetworkMode: container:<id>``; it works for images without a shell)
prints ``/proc/net/{tcp,tcp6,udp,udp6}`` twice a second: sockets listening (TCP) or
unconnected (UDP) are the ports the image listens on, loopback ones apart. The trial ends when
the image exits, listens on a routable address, or its time is up (a server still up then
passes). Writes come from the daemon's diff of the container's file system
(``GET /containers/{id}/changes``), those under ``declared_paths`` left out. The container,
the helper and the network are removed on every path.

A trial whose ``isolation_floor`` is sandboxed runs under the sandbox runtime. Where an adapter
may run a trial sandboxed, neither ports nor writes are observed (for any trial: the
capabilities say so once): gVisor's network stack keeps its sockets out of the namespace's
``/proc/net`` tables the helper reads, and its root file system writes to an overlay of its
own, so the daemon's diff does not show the paths written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import anyio

from pando_runtime import AdapterFailed, Port, TrialRequest, TrialResult
from pando_runtime.plugin import SOCKET_TABLES_SCRIPT, listening_ports, split_socket_tables

from .._log import logger
from ..api import EngineError, EngineTransport, FrameDecoder, write_failed
from ..manifests import Naming, hardening
from ._helper import HelperJob, helper_label, run_helper
from ._images import pull_image
from ._oci_runtimes import OciRuntimes

__all__ = ["TRIAL_LOG_LIMIT", "Trials", "observed_writes"]

_LOG = logger("trial")

TRIAL_LOG_LIMIT = 64 * 1024
_END = "==> end"
OBSERVE_SCRIPT = f'while :; do {SOCKET_TABLES_SCRIPT}; echo "{_END}"; sleep 0.5; done'
_POLL = 0.2


def observed_writes(changes: Iterable[Mapping[str, Any]], declared: Iterable[str]) -> list[str]:
    """Paths the image added, changed or deleted outside ``declared`` paths, leaves only.

    The diff lists a directory as changed when something in it changed: only the deepest
    paths are writes of their own (found before the declared ones are left out, so a parent
    of a declared path is not reported for a write inside it).
    """
    roots = tuple(p.rstrip("/") + "/" for p in declared)
    paths = sorted({str(c.get("Path", "")) for c in changes if c.get("Path")})
    leaves = [p for p in paths if not any(other.startswith(p.rstrip("/") + "/") for other in paths)]
    return [p for p in leaves if not (p + "/").startswith(roots)] if roots else leaves


def _key(port: Port) -> tuple[int, str]:
    return (port.number, port.protocol.value)


class Trials:
    """Trial runs on one daemon."""

    def __init__(
        self, api: EngineTransport, naming: Naming, helper_image: str, runtimes: OciRuntimes
    ) -> None:
        self._api = api
        self._runtimes = runtimes
        self._naming = naming
        self._helper_image = helper_image

    async def trial(self, request: TrialRequest) -> TrialResult:
        """Run the image once, alone; report exit code, ports, writes and its first 64 KiB."""
        labels = {helper_label(self._naming): self._naming.owner}
        # Bundle ids hold no dots: this name cannot be a bundle network's.
        network = f"{self._naming.owner}.trial.{request.trial_id}"
        container: str | None = None
        network_id: str | None = None
        try:
            answer = await self._api.request(
                "POST",
                "/networks/create",
                body={"Name": network, "CheckDuplicate": True, "Driver": "bridge",
                      "Labels": labels},
            )  # fmt: skip
            network_id = str(answer.json()["Id"])
            container, problem = await self._create(request, network, labels)
            if container is None:
                return TrialResult(started=False, log=problem.encode()[:TRIAL_LOG_LIMIT])
            try:
                await self._api.request("POST", "/containers/{id}/start", args={"id": container})
            except EngineError as error:
                message = f"the trial does not start: {error.message}"
                return TrialResult(started=False, log=message.encode())
            return await self._watch(request, container)
        except EngineError as error:
            if error.conflict and network_id is None:
                raise AdapterFailed(
                    f"a trial {request.trial_id!r} is running already (its network exists)",
                    remedy="Wait for it to end, or give this trial another id.",
                    details={**error.details, "trial_id": request.trial_id},
                ) from None
            raise write_failed(error, f"running trial {request.trial_id!r}") from None
        finally:
            with anyio.CancelScope(shield=True):
                await self._clean(container, network_id)

    async def _create(
        self, request: TrialRequest, network: str, labels: dict[str, str]
    ) -> tuple[str | None, str]:
        runtime = self._runtimes.for_isolation(request.isolation_floor)
        body = {
            "Image": request.image,
            "Cmd": list(request.command) or None,
            "Entrypoint": list(request.entrypoint) or None,
            "WorkingDir": request.working_dir or "",
            "Env": [f"{k}={v}" for k, v in sorted(request.env.items())],
            "Labels": labels,
            "HostConfig": {
                "NetworkMode": network,
                "RestartPolicy": {"Name": "no"},
                "LogConfig": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "1"}},
                **hardening(),
                "PidsLimit": 4096,
                **({"Runtime": runtime} if runtime is not None else {}),
            },
        }
        for attempt in range(2):
            try:
                answer = await self._api.request("POST", "/containers/create", body=body)
            except EngineError as error:
                if error.not_found and attempt == 0:
                    problem = await pull_image(self._api, request.image, request.pull_auth)
                    if problem is None:
                        continue
                    return None, f"the image cannot be pulled: {problem}"
                return None, f"the trial cannot be created: {error.message}"
            container = str(answer.json()["Id"])
            await self._runtimes.verify(container, runtime, f"trial {request.trial_id!r}")
            return container, ""
        return None, "the trial cannot be created"  # pragma: no cover - the loop returns

    async def _state(self, container: str) -> dict[str, Any]:
        data = await self._api.get_json("/containers/{id}/json", args={"id": container})
        return dict(data.get("State") or {})

    async def _watch(self, request: TrialRequest, container: str) -> TrialResult:
        routable: set[Port] = set()
        loopback: set[Port] = set()
        exit_code: int | None = None
        with anyio.move_on_after(request.timeout_seconds):
            async with anyio.create_task_group() as group:

                async def until_exit() -> None:
                    nonlocal exit_code
                    while True:
                        state = await self._state(container)
                        if not state.get("Running") and state.get("Status") != "created":
                            exit_code = int(state.get("ExitCode", 0))
                            group.cancel_scope.cancel()
                            return
                        await anyio.sleep(_POLL)

                async def ports() -> None:
                    if self._runtimes.sandboxes:
                        return  # not observed (see the module's docstring)
                    await self._observe_ports(container, routable, loopback)
                    if routable:
                        group.cancel_scope.cancel()  # it serves: what the trial is for

                group.start_soon(until_exit)
                group.start_soon(ports)
        if exit_code is None:
            state = await self._state(container)  # it may have ended at the very last moment
            if not state.get("Running"):
                exit_code = int(state.get("ExitCode", 0))
        changes: list[Any] = []
        if not self._runtimes.sandboxes:
            changes = await self._api.get_json("/containers/{id}/changes", args={"id": container})
        return TrialResult(
            started=True,
            exit_code=exit_code,
            observed_ports=sorted(routable, key=_key),
            loopback_ports=sorted(loopback - routable, key=_key),
            observed_writes=observed_writes(changes or (), request.declared_paths),
            log=await self._log(container),
        )

    async def _observe_ports(
        self, container: str, routable: set[Port], loopback: set[Port]
    ) -> None:
        """Add the ports each round of the helper's socket tables shows, until one routes."""
        job = HelperJob(
            image=self._helper_image,
            command=("sh", "-c", OBSERVE_SCRIPT),
            network_mode=f"container:{container}",
            what="the trial's port observer",
        )
        try:
            async with run_helper(self._api, self._naming, job) as run:
                text = ""
                while not routable:
                    try:
                        chunk = await run.receive()
                    except anyio.EndOfStream:
                        return
                    text += chunk.decode(errors="replace")
                    while _END in text:
                        block, _, text = text.partition(_END)
                        seen, local = listening_ports(split_socket_tables(block))
                        routable.update(seen)
                        loopback.update(local)
        except AdapterFailed as error:
            # The image ended before the observer could join it: its exit code says so.
            _LOG.debug("port observer: %s", error.message)

    async def _log(self, container: str) -> bytes:
        decoder = FrameDecoder()
        log = bytearray()
        async with self._api.stream(
            "GET",
            "/containers/{id}/logs",
            args={"id": container},
            params={"stdout": True, "stderr": True, "follow": False},
        ) as response:
            async for raw in response.aiter_raw():
                for _, payload in decoder.feed(raw):
                    log += payload
                if len(log) >= TRIAL_LOG_LIMIT:
                    break
        return bytes(log[:TRIAL_LOG_LIMIT])

    async def _clean(self, container: str | None, network_id: str | None) -> None:
        if container is not None:
            try:
                await self._api.remove_container(container)
            except EngineError as error:
                _LOG.warning("could not remove a trial container: %s", error.message)
        if network_id is not None:
            try:
                await self._api.request("DELETE", "/networks/{id}", args={"id": network_id})
            except EngineError as error:
                if not error.not_found:
                    _LOG.warning("could not remove a trial network: %s", error.message)
