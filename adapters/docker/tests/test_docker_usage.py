"""Usage on a real engine: a busy workload's CPU, memory, written bytes and volume bytes."""

from __future__ import annotations

import anyio
import pytest
from _docker_tests import running, until, workload
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

MiB = 1024**2

BUSY = (
    "sh",
    "-c",
    (
        "dd if=/dev/zero of=/layer.bin bs=1M count=3 2>/dev/null; "
        "dd if=/dev/zero of=/data/volume.bin bs=1M count=2 2>/dev/null; "
        "touch /ready; while :; do :; done"
    ),
)


async def test_usage_reports_cpu_memory_and_bytes_written(docker_adapter: DockerAdapter) -> None:
    plan = pr.BundlePlan(
        bundle_id="busy",
        workloads=(
            workload(
                "spin",
                command=BUSY,
                mounts=(pr.Mount("vol-busy", "/data"),),
                resources=pr.Resources(cpu_millis=500, memory_bytes=64 * MiB),
            ),
            workload("idle"),
        ),
        volumes=(pr.VolumePlan(volume_id="vol-busy", name="data"),),
    )
    await docker_adapter.apply(plan)
    await until(docker_adapter, "busy", running, "both workloads to run")
    ready = pr.ExecRequest(command=("sh", "-c", "test -f /ready"))
    with anyio.fail_after(60):
        while (await docker_adapter.run(pr.WorkloadRef("busy", "spin"), ready)).exit_code != 0:  # noqa: ASYNC110 - asks the container each pass
            await anyio.sleep(0.1)

    usage = await docker_adapter.usage(pr.BundleRef("busy"))
    by_name = {w.workload: w for w in usage.workloads}
    assert set(by_name) == {"spin", "idle"}
    spin = by_name["spin"]
    assert spin.running
    assert spin.cpu_millis > 0  # a busy loop, sampled over about a second
    assert spin.memory_bytes > 0
    assert (spin.cpu_limit_millis, spin.memory_limit_bytes) == (500, 64 * MiB)
    assert spin.disk_bytes >= 3 * MiB  # its writable layer, not the volume
    assert by_name["idle"].cpu_limit_millis is None
    assert by_name["idle"].disk_bytes < MiB
    (volume,) = usage.volumes
    assert volume.volume_id == "vol-busy"
    assert volume.bytes >= 2 * MiB

    total = await docker_adapter.in_use()
    assert total.cpu_millis > 0
    assert total.memory_bytes >= spin.memory_bytes // 2  # sampled again, a moment later

    await docker_adapter.stop(pr.BundleRef("busy"))
    stopped = await docker_adapter.usage(pr.BundleRef("busy"))
    assert all(not w.running and w.cpu_millis == 0 for w in stopped.workloads)
    assert (await docker_adapter.in_use()).cpu_millis == 0
