"""Benchmark: the Docker adapter's volume backups, image imports and usage on a real engine.

Starts the tests' Docker Engine (``tests/support/localdocker``: dockerd in namespaces of its
own, busybox built offline), then, ``--rounds`` times: restores a volume from a tar of
``--megabytes`` of random data (plus 1,000 small files), snapshots it back, imports a built
image archive (busybox plus ``--megabytes`` of random data) and reads one bundle's usage.
Prints the minimum, median and maximum of each, with sizes and rates. Needs root and Debian's
``docker.io``; says what is missing and exits 0 otherwise.

Prints figures; asserts only that each round trip gave back what it was given.

    python adapters/docker/benchmarks/volumes_and_images.py [--rounds 3] [--megabytes 64]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

import pando_runtime as pr
from pando_runtime.testing import make_tar, read_tar

if TYPE_CHECKING:  # the test support packages join the path in main()
    from localdocker import DockerEngine

ROOT = Path(__file__).resolve().parents[3]


async def measure(
    engine: DockerEngine, rounds: int, megabytes: int, work: Path
) -> dict[str, list[float]]:
    from localdocker import BUSYBOX, build_image  # noqa: PLC0415 - after the path is set
    from pando_runtime_docker import DockerAdapter  # noqa: PLC0415 - the adapter under test

    figures: dict[str, list[float]] = {}
    files = {f"small/{i:04}.txt": f"file {i}\n".encode() for i in range(1000)}
    files["big.bin"] = os.urandom(megabytes * 2**20)
    archive = make_tar(files)
    built = build_image(
        f"pando.bench/imported-{uuid.uuid4().hex[:6]}:1",
        files={"/payload.bin": os.urandom(megabytes * 2**20)},
        cmd=("sleep", "600"),
        directory=work,
    )
    image_bytes = built.archive.read_bytes()
    config = {
        "host": f"unix://{engine.socket_path}",
        "owner": "bench",
        "helper_image": BUSYBOX,
        "stop_timeout": 1,
    }
    async with DockerAdapter(config) as adapter:
        request = pr.VolumeRequest(volume_id="vol-bench", bundle_id="bench", name="data")
        handle = await adapter.create_volume(request)
        plan = pr.BundlePlan(
            bundle_id="bench",
            workloads=(pr.WorkloadPlan(name="app", image=BUSYBOX, command=("sleep", "600")),),
        )
        await adapter.apply(plan)
        for _ in range(rounds):
            started = time.perf_counter()
            await adapter.restore_volume(handle, pr.BytesReceiveStream(archive))
            figures.setdefault("restore", []).append(time.perf_counter() - started)
            started = time.perf_counter()
            async with adapter.snapshot_volume(handle) as stream:
                snapshot = await pr.read_all(stream)
            figures.setdefault("snapshot", []).append(time.perf_counter() - started)
            assert read_tar(snapshot) == files, "the snapshot differs from what was restored"
            started = time.perf_counter()
            reference = await adapter.import_image(pr.BytesReceiveStream(image_bytes))
            figures.setdefault("import_image", []).append(time.perf_counter() - started)
            assert await adapter.has_image(reference)
            # Removed again, so the next round loads every layer anew.
            await anyio.to_thread.run_sync(functools.partial(engine.docker, "rmi", "-f", reference))
            started = time.perf_counter()
            usage = await adapter.usage(pr.BundleRef("bench"))
            figures.setdefault("usage (1 workload)", []).append(time.perf_counter() - started)
            assert usage.workloads[0].running
        await adapter.destroy(pr.BundleRef("bench"), pr.DestroyOptions(keep_volumes=False))
    figures["sizes"] = [len(archive), len(snapshot), len(image_bytes)]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--megabytes", type=int, default=64)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localdocker import DockerEngine, missing  # noqa: PLC0415 - after the path above

    absent = missing()
    if absent:
        print(f"docker volumes benchmark: skipped, this machine lacks {', '.join(absent)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="pando-docker-bench-") as work:
        engine = DockerEngine(Path(work) / "engine")
        try:
            engine.open()
            figures = anyio.run(measure, engine, args.rounds, args.megabytes, Path(work))
        finally:
            engine.close()
    tar_bytes, snapshot_bytes, image_bytes = figures.pop("sizes")
    print(
        f"docker adapter volumes and images, {args.rounds} rounds: volume tar "
        f"{tar_bytes / 2**20:.1f} MiB (1,000 small files and {args.megabytes} MiB random), "
        f"snapshot {snapshot_bytes / 2**20:.1f} MiB, image archive {image_bytes / 2**20:.1f} MiB"
    )
    sizes = {"restore": tar_bytes, "snapshot": snapshot_bytes, "import_image": image_bytes}
    for name, values in figures.items():
        low, mid, high = min(values), statistics.median(values), max(values)
        rate = f"  {sizes[name] / 2**20 / mid:7.1f} MiB/s" if name in sizes else ""
        print(f"  {name:20} min {low:6.3f} s  median {mid:6.3f} s  max {high:6.3f} s{rate}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
