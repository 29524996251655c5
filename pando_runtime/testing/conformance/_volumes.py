"""Conformance: volumes, snapshots and restores."""

from __future__ import annotations

import os

import anyio

from ..._contract._capabilities import Capability
from ..._contract._plans import Mount, VolumePlan
from ..._contract._refs import BundleRef
from ..._contract._streams import BytesReceiveStream, read_all
from ..._contract._volumes import VolumeHandle, VolumeRequest
from .._tar import make_tar, read_tar
from ._base import ConformanceBase, Kit, since

__all__ = ["VolumeConformance"]


class VolumeConformance(ConformanceBase):
    """Volumes outlive apps; a snapshot then a restore gives back the same bytes."""

    gate = (Capability.PERSISTENT_VOLUMES,)

    async def _volume(self, kit: Kit) -> tuple[str, VolumeHandle]:
        bundle_id = kit.new_id()
        request = VolumeRequest(
            volume_id=kit.new_id("vol"),
            bundle_id=bundle_id,
            name="data",
            size_bytes=64 * 1024 * 1024,
        )
        handle = await kit.adapter.create_volume(request)
        kit.track_volume(handle)
        again = await kit.adapter.create_volume(request)
        assert again == handle, "create_volume is idempotent"
        return bundle_id, handle

    @since("1.0")
    async def test_restore_then_snapshot_gives_the_same_bytes(self, kit: Kit) -> None:
        _, handle = await self._volume(kit)
        files = {
            "hello.txt": b"hello volume\n",
            "nested/dir/blob.bin": os.urandom(200_000),
            "empty": b"",
        }
        with anyio.fail_after(kit.harness.timeout):
            await kit.adapter.restore_volume(handle, BytesReceiveStream(make_tar(files)))
            async with kit.adapter.snapshot_volume(handle) as stream:
                snapshot = await read_all(stream)
        assert read_tar(snapshot) == files

    @since("1.0")
    async def test_restore_replaces_contents_in_place(self, kit: Kit) -> None:
        _, handle = await self._volume(kit)
        with anyio.fail_after(kit.harness.timeout):
            await kit.adapter.restore_volume(handle, BytesReceiveStream(make_tar({"old": b"1"})))
            await kit.adapter.restore_volume(handle, BytesReceiveStream(make_tar({"new": b"2"})))
            async with kit.adapter.snapshot_volume(handle) as stream:
                files = read_tar(await read_all(stream))
        assert files == {"new": b"2"}

    @since("1.0")
    async def test_data_outlives_the_app(self, kit: Kit) -> None:
        volume = VolumePlan(volume_id=kit.new_id("vol"), name="data")
        plan = kit.plan(
            kit.workload("web", mounts=(Mount(volume.volume_id, "/data"),)), volumes=(volume,)
        )
        observed = await kit.applied_and_running(plan)
        handle = observed.volume(volume.volume_id).handle
        assert handle is not None
        with anyio.fail_after(kit.harness.timeout):
            await kit.adapter.restore_volume(handle, BytesReceiveStream(make_tar({"keep": b"me"})))
        await kit.adapter.destroy(BundleRef(plan.bundle_id))
        await kit.until_observed(
            plan, lambda o: not any(w.present for w in o.workloads), "the workloads to be gone"
        )
        await kit.applied_and_running(plan)
        with anyio.fail_after(kit.harness.timeout):
            async with kit.adapter.snapshot_volume(handle) as stream:
                assert read_tar(await read_all(stream)) == {"keep": b"me"}

    @since("1.0")
    async def test_destroy_volume_deletes_it(self, kit: Kit) -> None:
        bundle_id, handle = await self._volume(kit)
        await kit.adapter.destroy_volume(handle)
        observed = await kit.observe(bundle_id)
        assert all(not v.present for v in observed.volumes)
