"""Volumes on a real engine: labels, what destroy keeps, what a restore may and may not do."""

from __future__ import annotations

import io
import tarfile

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import running, until, workload
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.features._helper import HelperJob, run_helper
from pando_runtime_docker.features._volumes import SNAPSHOT_CAPS

import pando_runtime as pr
from pando_runtime.testing import make_tar, read_tar

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


def owned_tar() -> bytes:
    """A private directory and file of uid 1000 (mode 0700 and 0600), as a real app leaves."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folder = tarfile.TarInfo("private")
        folder.type, folder.mode, folder.uid, folder.gid = tarfile.DIRTYPE, 0o700, 1000, 1000
        tar.addfile(folder)
        data = b"only uid 1000 reads this\n"
        secret = tarfile.TarInfo("private/key")
        secret.size, secret.mode, secret.uid, secret.gid = len(data), 0o600, 1000, 1000
        tar.addfile(secret, io.BytesIO(data))
    return buffer.getvalue()


async def snapshot(adapter: DockerAdapter, handle: pr.VolumeHandle) -> bytes:
    with anyio.fail_after(60):
        async with adapter.snapshot_volume(handle) as stream:
            return await pr.read_all(stream)


async def test_a_volume_is_labelled_and_owners_and_modes_survive_a_round_trip(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    request = pr.VolumeRequest(volume_id="vol-a", bundle_id="volapp", name="data")
    handle = await docker_adapter.create_volume(request)
    name = docker_adapter.naming.volume_name("vol-a")
    labels = (await harness.inspect(name))["Labels"]
    assert labels["io.pando.owner"] == docker_adapter.naming.owner
    assert labels["io.pando.bundle"] == "volapp"
    assert labels["io.pando.volume"] == "vol-a"

    await docker_adapter.restore_volume(handle, pr.BytesReceiveStream(owned_tar()))
    with tarfile.open(fileobj=io.BytesIO(await snapshot(docker_adapter, handle))) as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
        assert (members["private"].uid, members["private"].mode) == (1000, 0o700)
        assert (members["private/key"].uid, members["private/key"].mode) == (1000, 0o600)
        key = tar.extractfile(members["private/key"])
        assert key is not None
        assert key.read() == b"only uid 1000 reads this\n"
    # No helper is left behind.
    helpers = f"label=io.pando.helper={docker_adapter.naming.owner}"
    assert (await harness.docker("ps", "-aq", "--filter", helpers)).split() == []


async def test_a_bad_archive_fails_and_changes_nothing(docker_adapter: DockerAdapter) -> None:
    request = pr.VolumeRequest(volume_id="vol-b", bundle_id="volapp", name="data")
    handle = await docker_adapter.create_volume(request)
    await docker_adapter.restore_volume(handle, pr.BytesReceiveStream(make_tar({"kept": b"1"})))
    with pytest.raises(pr.AdapterFailed, match="not a valid tar archive"):
        await docker_adapter.restore_volume(handle, pr.BytesReceiveStream(b"this is no tar" * 100))
    assert read_tar(await snapshot(docker_adapter, handle)) == {"kept": b"1"}


async def test_destroy_keeps_volumes_unless_asked(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    volume = pr.VolumePlan(volume_id="vol-c", name="data")
    plan = pr.BundlePlan(
        bundle_id="volkeep",
        workloads=(
            workload(
                "web",
                mounts=(pr.Mount("vol-c", "/data"),),
                command=("sh", "-c", "echo written > /data/f; exec sleep 600"),
            ),
        ),
        volumes=(volume,),
    )
    await docker_adapter.apply(plan)
    observed = await until(docker_adapter, "volkeep", running, "the workload to run")
    handle = observed.volume("vol-c").handle
    assert handle is not None
    name = docker_adapter.naming.volume_name("vol-c")
    with anyio.fail_after(60):
        while read_tar(await snapshot(docker_adapter, handle)) != {"f": b"written\n"}:  # noqa: ASYNC110 - each pass reads the volume again
            await anyio.sleep(0.1)

    # A volume in use cannot be destroyed: the error says so and the data stays.
    with pytest.raises(pr.AdapterFailed, match="in use"):
        await docker_adapter.destroy_volume(handle)

    await docker_adapter.destroy(pr.BundleRef("volkeep"))
    assert (await harness.inspect(name))["Name"] == name
    after = await docker_adapter.observe(pr.BundleRef("volkeep"))
    assert not after.exists
    assert after.volume("vol-c").present

    await docker_adapter.destroy(pr.BundleRef("volkeep"), pr.DestroyOptions(keep_volumes=False))
    listed = await harness.docker("volume", "ls", "-q", "--filter", f"name={name}")
    assert name not in listed.split()
    assert all(
        not v.present for v in (await docker_adapter.observe(pr.BundleRef("volkeep"))).volumes
    )


async def test_another_owners_volume_of_that_name_is_refused(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    name = docker_adapter.naming.volume_name("vol-d")
    await harness.docker("volume", "create", "--label", "someone=else", name)
    try:
        request = pr.VolumeRequest(volume_id="vol-d", bundle_id="volapp", name="data")
        with pytest.raises(pr.AdapterFailed, match="not this adapter's"):
            await docker_adapter.create_volume(request)
        labels = (await harness.inspect(name))["Labels"]
        assert labels == {"someone": "else"}
    finally:
        await harness.docker("volume", "rm", "-f", name, check=False)


async def probe_helper(adapter: DockerAdapter, job: HelperJob) -> tuple[list[str], int]:
    """What the helper printed (words) and the exit code its failure reported."""
    output = bytearray()

    async def probe() -> None:
        async with run_helper(adapter.transport, adapter.naming, job) as run:
            with anyio.fail_after(60):
                while True:
                    try:
                        output.extend(await run.receive())
                    except anyio.EndOfStream:
                        return

    with pytest.raises(pr.AdapterFailed, match="Read-only file system") as failed:
        await probe()
    return bytes(output).decode().split(), failed.value.details["exit_code"]


async def test_the_helper_has_no_network_and_only_the_capabilities_it_needs(
    docker_adapter: DockerAdapter,
) -> None:
    script = "grep CapEff /proc/self/status; ls /sys/class/net; touch /x"
    job = HelperJob(image=BUSYBOX, command=("sh", "-c", script), capabilities=SNAPSHOT_CAPS)
    words, code = await probe_helper(docker_adapter, job)
    # Its exit code (touch on a read-only root) decided, after all its output was read.
    assert code == 1
    assert words[words.index("CapEff:") + 1] == f"{1 << 2:016x}"  # CAP_DAC_READ_SEARCH alone
    assert words[words.index("CapEff:") + 2 :] == ["lo"]  # no interface but loopback
    # Control: the same probe on the default bridge with CHOWN sees both change.
    control = HelperJob(
        image=BUSYBOX, command=("sh", "-c", script), capabilities=("CHOWN",), network_mode="bridge"
    )
    words, _ = await probe_helper(docker_adapter, control)
    assert words[words.index("CapEff:") + 1] == f"{1 << 0:016x}"
    assert "eth0" in words


async def test_leaving_a_snapshot_early_removes_its_helper(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    request = pr.VolumeRequest(volume_id="vol-e", bundle_id="volapp", name="data")
    handle = await docker_adapter.create_volume(request)
    files = {f"f{i}": b"x" * 100_000 for i in range(20)}
    await docker_adapter.restore_volume(handle, pr.BytesReceiveStream(make_tar(files)))
    with anyio.fail_after(60):
        async with docker_adapter.snapshot_volume(handle) as stream:
            assert await stream.receive()  # one chunk, then leave
    helpers = f"label=io.pando.helper={docker_adapter.naming.owner}"
    assert (await harness.docker("ps", "-aq", "--filter", helpers)).split() == []
    assert read_tar(await snapshot(docker_adapter, handle)) == files
