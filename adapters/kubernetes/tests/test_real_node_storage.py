"""Volumes on a real node: what a container writes is on disk, and stays.

The volume pool's hostPath volumes are really mounted by kubelet; the volume helper of
``snapshot_volume``/``restore_volume`` is a real pod whose ``tar`` runs in a container.
"""

from __future__ import annotations

import io
import tarfile

from _real import MARKS, new_id, sh, wait_for
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import (
    BundlePlan,
    BundleRef,
    BytesReceiveStream,
    ExecRequest,
    Mount,
    VolumePlan,
    WorkloadRef,
    read_all,
)

pytestmark = MARKS


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _names(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        out = {}
        for member in archive.getmembers():
            if member.isfile():
                extracted = archive.extractfile(member)
                assert extracted is not None
                out[member.name.removeprefix("./")] = extracted.read()
        return out


async def test_writes_survive_stop_reapply_and_destroy_and_round_trip_a_snapshot(
    real_adapter: KubernetesAdapter,
) -> None:
    bundle = new_id("real-vol")
    plan = BundlePlan(
        bundle_id=bundle,
        # Ends on SIGTERM: stop and the re-apply after destroy wait for it, not a grace period.
        workloads=(
            sh(
                "db",
                "trap 'exit 143' TERM; sleep 3600 & wait",
                mounts=(Mount(volume_id="data", path="/var/db"),),
            ),
        ),
        volumes=(VolumePlan(volume_id="data", name="data"),),
    )
    ref = WorkloadRef(bundle, "db")

    async def cat(path: str) -> bytes:
        result = await real_adapter.run(ref, ExecRequest(command=("cat", path)))
        assert result.exit_code == 0, result
        return result.stdout

    await real_adapter.apply(plan)
    try:
        first = await wait_for(real_adapter, bundle, lambda o: o.all_running)
        written = await real_adapter.run(
            ref, ExecRequest(command=("sh", "-c", "echo first > /var/db/a.txt && sync"))
        )
        assert written.exit_code == 0

        await real_adapter.stop(BundleRef(bundle))
        await wait_for(real_adapter, bundle, lambda o: not any(w.running for w in o.workloads))
        await real_adapter.apply(plan)
        second = await wait_for(real_adapter, bundle, lambda o: o.all_running)
        assert second.workload("db").instance_id != first.workload("db").instance_id
        assert await cat("/var/db/a.txt") == b"first\n"

        await real_adapter.destroy(BundleRef(bundle))  # keeps volumes
        await real_adapter.apply(plan)
        await wait_for(real_adapter, bundle, lambda o: o.all_running)
        assert await cat("/var/db/a.txt") == b"first\n"

        handle = (await real_adapter.observe(BundleRef(bundle))).volume("data").handle
        assert handle is not None
        async with real_adapter.snapshot_volume(handle) as stream:
            snapshot = await read_all(stream)
        assert _names(snapshot)["a.txt"] == b"first\n"

        await real_adapter.restore_volume(
            handle, BytesReceiveStream(_tar({"b.txt": b"restored\n"}))
        )
        assert await cat("/var/db/b.txt") == b"restored\n"
        gone = await real_adapter.run(ref, ExecRequest(command=("test", "-e", "/var/db/a.txt")))
        assert gone.exit_code == 1, "restore replaces the contents in place"
    finally:
        await real_adapter.destroy(BundleRef(bundle))
