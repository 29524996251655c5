"""Throwaway helper containers: one command over a volume, tar in or out, its exit code.

A helper has no network, drops every capability but the few its job needs, cannot gain
privileges, has a read-only root file system and a small process limit. The adapter attaches
to it before starting it (no output is missed), writes its stdin over the hijacked
connection and half-closes it (the command sees end-of-file while its output still comes),
then reads the exit code from ``wait``: that code, never the output, decides success. The
container is removed on every path, errors and cancellation included.

Helpers carry ``<prefix>.helper=<owner>`` and not the owner label, so the container cache
(and the bundle events it publishes) never sees them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import anyio
import attrs
from anyio.abc import ByteReceiveStream

from pando_runtime import AdapterFailed

from .._log import logger
from ..api import EngineError, EngineTransport, FrameDecoder, HijackedStream, StreamKind
from ..manifests import Naming
from ._images import pull_image

__all__ = ["HelperJob", "HelperRun", "helper_body", "helper_label", "run_helper", "volume_mount"]

_LOG = logger("helper")

_STDERR_KEPT = 2000


def helper_label(naming: Naming) -> str:
    """The label key that marks this owner's helper containers."""
    return f"{naming.prefix}.helper"


@attrs.frozen(kw_only=True)
class HelperJob:
    """What one helper runs: the command, its mounts, whether it reads stdin, its caps."""

    image: str
    command: tuple[str, ...]
    mounts: tuple[dict[str, Any], ...] = ()
    stdin: bool = False
    capabilities: tuple[str, ...] = ()
    network_mode: str = "none"
    what: str = "the helper"


def helper_body(job: HelperJob, naming: Naming) -> dict[str, Any]:
    """The helper's create request (pure)."""
    return {
        "Image": job.image,
        "Entrypoint": [job.command[0]],
        "Cmd": list(job.command[1:]),
        "AttachStdin": job.stdin,
        "OpenStdin": job.stdin,
        "StdinOnce": job.stdin,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": False,
        "NetworkDisabled": job.network_mode == "none",
        "Labels": {helper_label(naming): naming.owner},
        "HostConfig": {
            "NetworkMode": job.network_mode,
            "CapDrop": ["ALL"],
            "CapAdd": list(job.capabilities),
            "SecurityOpt": ["no-new-privileges"],
            "ReadonlyRootfs": True,
            "PidsLimit": 64,
            "Mounts": list(job.mounts),
            "LogConfig": {"Type": "none"},
            "RestartPolicy": {"Name": "no"},
        },
    }


class HelperRun(ByteReceiveStream):
    """A started helper: its stdout as a byte stream, stderr kept, the exit code at the end.

    Reading to the end waits for the exit code; a code other than 0 raises
    :class:`AdapterFailed` (with the end of stderr) instead of the end of the stream, so a
    reader never mistakes a cut-off output for a whole one.
    """

    def __init__(
        self, api: EngineTransport, container_id: str, hijacked: HijackedStream, what: str
    ) -> None:
        self._api = api
        self.container_id = container_id
        self._hijacked = hijacked
        self._what = what
        self._decoder = FrameDecoder()
        self._pending: list[bytes] = []
        self._stderr = bytearray()
        self._ended = False
        self.exit_code: int | None = None

    @property
    def stderr(self) -> str:
        """What the command wrote to stderr (its end, decoded)."""
        return self._stderr.decode(errors="replace").strip()

    async def feed(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> None:
        """Write ``source`` to the command's stdin, then end it (half-close)."""
        try:
            async for chunk in source:
                if chunk:
                    await self._hijacked.send(bytes(chunk))
        except (OSError, anyio.BrokenResourceError) as error:
            # The command stopped reading (it failed): its exit code tells why.
            _LOG.debug("%s stopped reading its input: %s", self._what, error)
        finally:
            self._hijacked.close_write()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._pending:
            if self._ended:
                raise anyio.EndOfStream
            chunk = await self._hijacked.receive()
            if not chunk:
                await self._finish()
                raise anyio.EndOfStream
            for kind, payload in self._decoder.feed(chunk):
                if kind is StreamKind.STDERR:
                    self._stderr += payload
                    del self._stderr[:-_STDERR_KEPT]
                else:
                    self._pending.append(payload)
        chunk = self._pending[0]
        if len(chunk) > max_bytes:
            self._pending[0] = chunk[max_bytes:]
            return chunk[:max_bytes]
        self._pending.pop(0)
        return chunk

    async def drain(self) -> None:
        """Read (and drop) the stdout to the end; raises as :meth:`receive` does."""
        with contextlib.suppress(anyio.EndOfStream):
            while True:
                await self.receive()

    async def _finish(self) -> None:
        self._ended = True
        try:
            answer = await self._api.request(
                "POST", "/containers/{id}/wait", args={"id": self.container_id}
            )
        except EngineError as error:
            raise AdapterFailed(
                f"{self._what} ended, and its exit code cannot be read: {error.message}",
                details=error.details,
            ) from None
        code = answer.json().get("StatusCode")
        self.exit_code = int(code) if code is not None else None
        if self.exit_code != 0:
            raise AdapterFailed(
                f"{self._what} failed (exit {self.exit_code}): {self.stderr[-300:]}",
                details={"exit_code": self.exit_code},
            )

    async def aclose(self) -> None:
        await self._hijacked.aclose()


@contextlib.asynccontextmanager
async def run_helper(
    api: EngineTransport, naming: Naming, job: HelperJob
) -> AsyncIterator[HelperRun]:
    """Create, attach and start a helper; remove it when the block ends."""
    body = helper_body(job, naming)
    container_id = await _create(api, body, job)
    try:
        try:
            hijacked = await api.upgrade(
                "/containers/{id}/attach",
                args={"id": container_id},
                params={"stream": True, "stdin": job.stdin, "stdout": True, "stderr": True},
            )
        except EngineError as error:
            raise AdapterFailed(
                f"{job.what} could not be attached: {error.message}", details=error.details
            ) from None
        run = HelperRun(api, container_id, hijacked, job.what)
        try:
            if not job.stdin:
                hijacked.close_write()
            try:
                await api.request("POST", "/containers/{id}/start", args={"id": container_id})
            except EngineError as error:
                raise AdapterFailed(
                    f"{job.what} could not start: {error.message}", details=error.details
                ) from None
            yield run
        finally:
            await run.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await _remove(api, container_id)


async def _create(api: EngineTransport, body: dict[str, Any], job: HelperJob) -> str:
    for attempt in range(2):
        try:
            # Shielded: a create cancelled in flight still makes the container, and only its
            # ID lets the caller remove it (a trial's port observer was left behind so).
            with anyio.CancelScope(shield=True):
                answer = await api.request("POST", "/containers/create", body=body)
            return str(answer.json()["Id"])
        except EngineError as error:
            if error.not_found and attempt == 0:
                problem = await pull_image(api, job.image, None)
                if problem is None:
                    continue
                raise AdapterFailed(
                    f"the helper image {job.image!r} cannot be pulled: {problem}",
                    remedy="Load the image into the daemon or set 'helper_image' to one it has "
                    "(it needs sh and tar).",
                    details={"image": job.image},
                ) from None
            raise AdapterFailed(
                f"{job.what} could not be created: {error.message}", details=error.details
            ) from None
    raise AdapterFailed(f"{job.what} could not be created")  # pragma: no cover - loop returns


async def _remove(api: EngineTransport, container_id: str) -> None:
    try:
        await api.request(
            "DELETE", "/containers/{id}", args={"id": container_id}, params={"force": True}
        )
    except EngineError as error:
        if not error.not_found:
            _LOG.warning("could not remove helper %s: %s", container_id[:12], error.message)


def volume_mount(name: str, target: str, *, read_only: bool) -> dict[str, Any]:
    """A named volume's mount in a helper."""
    return {"Type": "volume", "Source": name, "Target": target, "ReadOnly": read_only}
