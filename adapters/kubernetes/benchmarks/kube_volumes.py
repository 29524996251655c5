"""Benchmark: volume snapshot and restore through the helper pod, and log streaming.

    python adapters/kubernetes/benchmarks/kube_volumes.py [--mib 100] [--log-mib 50]

It starts the local control plane (tests/support/localcluster). The bytes travel the whole
way a real cluster's do: tar stream -> exec WebSocket (v5) -> API server -> kubelet (kwok)
-> the helper's command, and back. kwok runs that command on this machine, so ``tar`` reads
and writes a local directory instead of a mounted volume: the figures measure the adapter,
the exec stream and the API server, not a storage backend. Prints MiB/s of a restore and of
a snapshot of a ``--mib`` volume, and of reading a ``--log-mib`` log.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import (
    BundlePlan,
    BundleRef,
    BytesReceiveStream,
    DestroyOptions,
    VolumeRequest,
    WorkloadPlan,
    WorkloadRef,
)

if TYPE_CHECKING:  # the test support packages join the path in main()
    from localcluster import LocalCluster

ROOT = Path(__file__).resolve().parents[3]
MIB = 1024 * 1024
CLASS = "pando-bench-manual"


def volume_tar(mib: int) -> bytes:
    """A tar of ``mib`` files of 1 MiB of random bytes (incompressible, as real data may be)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for i in range(mib):
            info = tarfile.TarInfo(f"data/blob-{i:04d}.bin")
            info.size = MIB
            archive.addfile(info, io.BytesIO(os.urandom(MIB)))
    return buffer.getvalue()


def provision(admin_kubeconfig: str, root: Path) -> None:
    """What an administrator does on a cluster without a provisioner: a class and a PV."""
    from kubeadmin import admin_client  # noqa: PLC0415
    from kubernetes import client  # noqa: PLC0415

    storage_class = client.V1StorageClass.model_validate(
        {
            "metadata": {"name": CLASS},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        }
    )
    volume = client.V1PersistentVolume.model_validate(
        {
            "metadata": {"name": "pando-bench-pv"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": CLASS,
                "hostPath": {"path": str(root / "pv"), "type": "DirectoryOrCreate"},
            },
        }
    )
    with admin_client(admin_kubeconfig) as api:
        client.StorageV1Api(api).create_storage_class(storage_class)
        client.CoreV1Api(api).create_persistent_volume(volume)


async def run(cluster: LocalCluster, mib: int, log_mib: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="pando-bench-volumes-"))
    await anyio.to_thread.run_sync(provision, str(cluster.kubeconfig), root)
    config = {
        "kubeconfig": str(cluster.kubeconfig),
        "trust_network_policy": True,
        "storage_class": CLASS,
        "helper_mount_root": str(root / "mounts"),
        "api_qps": 1000.0,
        "api_burst": 200,
    }
    data = volume_tar(mib)
    async with KubernetesAdapter(config) as adapter:
        handle = await adapter.create_volume(
            VolumeRequest(volume_id="bench", bundle_id="bench-volumes", name="bench")
        )
        start = time.perf_counter()
        await adapter.restore_volume(handle, BytesReceiveStream(data, chunk_size=256 * 1024))
        seconds = time.perf_counter() - start
        rate = len(data) / MIB / seconds
        print(f"restore:  {len(data) / MIB:.0f} MiB in {seconds:.2f} s = {rate:.1f} MiB/s")
        start = time.perf_counter()
        async with adapter.snapshot_volume(handle) as stream:
            parts = [chunk async for chunk in stream]
        seconds = time.perf_counter() - start
        snapshot = b"".join(parts)
        size = len(snapshot)
        with tarfile.open(fileobj=io.BytesIO(snapshot)) as archive:
            files = [m for m in archive.getmembers() if m.isfile()]
        assert len(files) == mib, f"the snapshot holds {len(files)} files, not {mib}"
        assert all(m.size == MIB for m in files)
        print(
            f"snapshot: {size / MIB:.0f} MiB in {seconds:.2f} s = {size / MIB / seconds:.1f} MiB/s"
        )
        await adapter.destroy_volume(handle)

        # Logs: kwok serves one CRI-format file as every pod's log.
        line = "x" * 1000
        with cluster.logs_file.open("a") as log:
            from localcluster import cri_log_line  # noqa: PLC0415

            text = cri_log_line(line)
            log.write(text * (log_mib * MIB // len(text)))
        plan = BundlePlan(
            bundle_id="bench-logs",
            workloads=(WorkloadPlan(name="web", image="registry.example/bench/app:1"),),
        )
        await adapter.apply(plan)
        with anyio.fail_after(60):
            while not (await adapter.observe(BundleRef(plan.bundle_id))).all_running:  # noqa: ASYNC110
                await anyio.sleep(0.2)
        start = time.perf_counter()
        size = 0
        async with adapter.logs(WorkloadRef(plan.bundle_id, "web")) as stream:
            async for chunk in stream:
                size += len(chunk)
        seconds = time.perf_counter() - start
        print(
            f"logs:     {size / MIB:.0f} MiB in {seconds:.2f} s = {size / MIB / seconds:.1f} MiB/s"
        )
        await adapter.destroy(BundleRef(plan.bundle_id), DestroyOptions(keep_volumes=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=100, help="volume size (MiB)")
    parser.add_argument("--log-mib", type=int, default=50, help="log size (MiB)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster import LocalCluster  # noqa: PLC0415

    with LocalCluster() as cluster:
        anyio.run(run, cluster, args.mib, args.log_mib)


if __name__ == "__main__":
    main()
