"""Volumes: named local volumes with the owner's labels, backed up through a helper.

A volume is ``<owner>.<volume id>``, labelled with the owner, its bundle, its id and name.
The adapter keeps its own list of them (read once when it opens, then changed by its own
writes), so ``observe`` reports a bundle's volumes without a call. ``destroy`` keeps them
unless asked; ``destroy_volume`` removes one with its data.

Snapshot and restore run a throwaway helper (:mod:`._helper`) that mounts the volume at
``/volume`` (read-only for a snapshot) and runs ``tar`` over its attached stdin or stdout.
A restore extracts into a staging directory first, so a bad archive changes nothing, then
empties the volume and moves the new files in. The local driver has no size limit: a
request's ``size_bytes`` is recorded as a label and not enforced.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Iterable

import anyio
import attrs
from anyio.abc import ByteReceiveStream

from pando_runtime import (
    AdapterFailed,
    BundlePlan,
    NotFound,
    ObservedVolume,
    VolumeHandle,
    VolumeRequest,
)
from pando_runtime.plugin import RESTORE_SCRIPT, raise_problems, validate_volume_request

from .._log import logger
from ..api import EngineError, EngineTransport, write_failed
from ..manifests import Naming
from ._helper import HelperJob, run_helper, volume_mount

__all__ = ["SNAPSHOT_SCRIPT", "Volumes"]

_LOG = logger("volumes")

MOUNT = "/volume"
SNAPSHOT_SCRIPT = f"cd {MOUNT} && exec tar -cf - ."

# tar reads every file and restores owners and modes: the few capabilities that takes.
SNAPSHOT_CAPS = ("DAC_READ_SEARCH",)
RESTORE_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID")


@attrs.frozen(kw_only=True)
class _Known:
    volume_id: str
    name: str
    bundle_id: str | None


class Volumes:
    """This owner's named volumes: created, listed, removed, backed up and restored."""

    def __init__(self, api: EngineTransport, naming: Naming, helper_image: str) -> None:
        self._api = api
        self._naming = naming
        self._helper_image = helper_image
        self._known: dict[str, _Known] = {}  # volume id -> what its labels say

    @property
    def _volume_id_key(self) -> str:
        return f"{self._naming.prefix}.volume"

    # -- the list ------------------------------------------------------------------------------

    async def relist(self) -> None:
        """Read this owner's volumes (when the adapter opens)."""
        answer = await self._api.get_json(
            "/volumes", params={"filters": {"label": [self._naming.owner_filter]}}
        )
        known = {}
        for volume in answer.get("Volumes") or ():
            entry = self._from_labels(volume)
            if entry is not None:
                known[entry.volume_id] = entry
        self._known = known

    def _from_labels(self, volume: dict[str, object]) -> _Known | None:
        labels = volume.get("Labels") or {}
        if not isinstance(labels, dict) or labels.get(self._naming.owner_key) != self._naming.owner:
            return None
        volume_id = labels.get(self._volume_id_key)
        if not volume_id:
            return None
        return _Known(
            volume_id=str(volume_id),
            name=str(volume.get("Name")),
            bundle_id=labels.get(self._naming.bundle_key) or None,
        )

    def handle(self, volume_id: str, bundle_id: str | None) -> VolumeHandle:
        """The handle of a volume: its name and bundle (opaque to the host)."""
        return VolumeHandle(
            volume_id=volume_id,
            handle=f"{self._naming.volume_name(volume_id)}/{bundle_id or ''}",
        )

    def _parse(self, handle: VolumeHandle) -> tuple[str, str | None]:
        name, _, bundle_id = handle.handle.partition("/")
        if name != self._naming.volume_name(handle.volume_id):
            raise NotFound(
                f"volume handle {handle.handle!r} was not made by this Docker adapter",
                remedy="Use the handle create_volume or observe returned.",
                details={"volume_id": handle.volume_id},
            )
        return name, bundle_id or None

    def observed(self, bundle_id: str, planned: Iterable[str] = ()) -> tuple[ObservedVolume, ...]:
        """The bundle's volumes as this adapter knows them: no call."""
        ids = set(planned) | {k.volume_id for k in self._known.values() if k.bundle_id == bundle_id}
        return tuple(
            ObservedVolume(
                volume_id=volume_id,
                present=volume_id in self._known,
                handle=self.handle(volume_id, bundle_id) if volume_id in self._known else None,
            )
            for volume_id in sorted(ids)
        )

    def bundle_ids(self) -> set[str]:
        """Every bundle with a volume this adapter knows."""
        return {k.bundle_id for k in self._known.values() if k.bundle_id}

    def names_of(self, bundle_id: str) -> dict[str, str]:
        """The bundle's volumes this adapter knows: volume id -> the daemon's volume name."""
        return {k.volume_id: k.name for k in self._known.values() if k.bundle_id == bundle_id}

    # -- create and remove ---------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """Create the named volume, or find it (idempotent); another owner's is refused."""
        raise_problems(validate_volume_request(request), f"volume {request.volume_id!r}")
        await self._ensure(request.volume_id, request.bundle_id, request.name, request.size_bytes)
        return self.handle(request.volume_id, request.bundle_id)

    async def _ensure(
        self, volume_id: str, bundle_id: str | None, name: str, size_bytes: int | None
    ) -> None:
        labels = {
            self._naming.owner_key: self._naming.owner,
            self._volume_id_key: volume_id,
            f"{self._naming.prefix}.volume-name": name,
        }
        if bundle_id:
            labels[self._naming.bundle_key] = bundle_id
        if size_bytes:
            labels[f"{self._naming.prefix}.size-bytes"] = str(size_bytes)
        volume_name = self._naming.volume_name(volume_id)
        try:
            answer = await self._api.request(
                "POST",
                "/volumes/create",
                body={"Name": volume_name, "Driver": "local", "Labels": labels},
            )
        except EngineError as error:
            raise write_failed(error, f"creating volume {volume_id!r}") from None
        # The daemon answers an existing volume of that name as it is: it must be ours.
        entry = self._from_labels(answer.json())
        if entry is None or entry.volume_id != volume_id:
            raise AdapterFailed(
                f"a volume named {volume_name!r} exists and is not this adapter's",
                remedy="Remove or rename the other volume, or give this adapter another "
                "'owner'; nothing was written.",
                details={"volume_id": volume_id, "volume": volume_name},
            )
        self._known[volume_id] = entry

    async def ensure_edge_volume(self, volume_id: str) -> None:
        """Create a volume an edge mounts unless this adapter knows it (no bundle label)."""
        if volume_id not in self._known:
            await self._ensure(volume_id, None, volume_id, None)

    async def ensure_for_plan(self, plan: BundlePlan) -> None:
        """Create the plan's volumes this adapter does not know yet (apply, before containers).

        The daemon would create a missing volume on mount, unlabelled: never left to it.
        """
        for volume in plan.volumes:
            if volume.volume_id not in self._known:
                await self._ensure(volume.volume_id, plan.bundle_id, volume.name, volume.size_bytes)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        """Remove the volume and its data (idempotent); a volume in use is refused."""
        name, _ = self._parse(handle)
        await self._remove(handle.volume_id, name)

    async def _remove(self, volume_id: str, name: str) -> None:
        try:
            await self._api.request("DELETE", "/volumes/{name}", args={"name": name})
        except EngineError as error:
            if error.conflict:
                raise AdapterFailed(
                    f"volume {volume_id!r} is in use by a container",
                    remedy="Destroy (or stop and destroy) the bundle that mounts it first.",
                    details={**error.details, "volume_id": volume_id},
                ) from None
            if not error.not_found:
                raise write_failed(error, f"removing volume {volume_id!r}") from None
        self._known.pop(volume_id, None)

    async def destroy_bundle_volumes(self, bundle_id: str) -> None:
        """Remove every volume of ``bundle_id`` (destroy with ``keep_volumes=False``)."""
        answer = await self._api.get_json(
            "/volumes",
            params={
                "filters": {
                    "label": [self._naming.owner_filter, f"{self._naming.bundle_key}={bundle_id}"]
                }
            },
        )
        for volume in answer.get("Volumes") or ():
            entry = self._from_labels(volume)
            if entry is not None:
                await self._remove(entry.volume_id, entry.name)

    # -- snapshot and restore ------------------------------------------------------------------

    async def _exists(self, volume_id: str, name: str) -> bool:
        try:
            data = await self._api.get_json("/volumes/{name}", args={"name": name})
        except EngineError as error:
            if error.not_found:
                self._known.pop(volume_id, None)
                return False
            raise write_failed(error, f"inspecting volume {volume_id!r}") from None
        entry = self._from_labels(data)
        if entry is None:
            raise NotFound(
                f"volume {name!r} is not this adapter's", details={"volume_id": volume_id}
            )
        self._known[volume_id] = entry
        return True

    @contextlib.asynccontextmanager
    async def snapshot_volume(self, handle: VolumeHandle) -> AsyncIterator[ByteReceiveStream]:
        """The volume's files as a tar stream, read by a helper that mounts it read-only."""
        name, _ = self._parse(handle)
        if not await self._exists(handle.volume_id, name):
            raise NotFound(
                f"volume {handle.volume_id!r} does not exist",
                details={"volume_id": handle.volume_id},
            )
        job = HelperJob(
            image=self._helper_image,
            command=("sh", "-c", SNAPSHOT_SCRIPT),
            mounts=(volume_mount(name, MOUNT, read_only=True),),
            capabilities=SNAPSHOT_CAPS,
            what=f"the snapshot of volume {handle.volume_id}",
        )
        async with run_helper(self._api, self._naming, job) as run:
            yield run

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        """Replace the volume's files with a tar stream, in place; creates it when absent."""
        name, bundle_id = self._parse(handle)
        if not await self._exists(handle.volume_id, name):
            await self._ensure(handle.volume_id, bundle_id, handle.volume_id, None)
        job = HelperJob(
            image=self._helper_image,
            command=("sh", "-c", RESTORE_SCRIPT, "sh", MOUNT),
            mounts=(volume_mount(name, MOUNT, read_only=False),),
            stdin=True,
            capabilities=RESTORE_CAPS,
            what=f"the restore of volume {handle.volume_id}",
        )
        failure: AdapterFailed | None = None
        async with (
            run_helper(self._api, self._naming, job) as run,
            anyio.create_task_group() as group,
        ):
            group.start_soon(run.feed, source)
            try:
                await run.drain()
            except AdapterFailed as error:
                failure = error
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        _LOG.info("restored volume %s", handle.volume_id, extra={"volume_id": handle.volume_id})
