"""Images on a real engine: an archive loaded and run by its ID, a bad one refused, lookups."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest
from _docker_harness import BUSYBOX, UNPULLABLE, DockerHarness
from _docker_tests import running, until, workload
from localdocker import build_image
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


def file_chunks(path: Path, size: int = 65536) -> pr.BytesReceiveStream:
    return pr.BytesReceiveStream(path.read_bytes(), chunk_size=size)


async def test_an_imported_archive_runs_by_the_id_import_returns(
    docker_adapter: DockerAdapter, harness: DockerHarness, tmp_path: Path
) -> None:
    name = f"pando.test/imported-{uuid.uuid4().hex[:8]}:1"
    built = build_image(
        name,
        files={"/etc/pando-test": b"imported offline\n"},
        cmd=("sh", "-c", "cat /etc/pando-test; exec sleep 600"),
        directory=tmp_path,
    )
    try:
        assert not await docker_adapter.has_image(name)
        with anyio.fail_after(60):
            reference = await docker_adapter.import_image(file_chunks(built.archive))
        assert reference.startswith("sha256:")
        assert reference == (await harness.inspect(name))["Id"]
        assert await docker_adapter.has_image(reference)
        assert await docker_adapter.has_image(name)

        plan = pr.BundlePlan(
            bundle_id="imported", workloads=(workload("app", image=reference, command=()),)
        )
        await docker_adapter.apply(plan)
        await until(docker_adapter, "imported", running, "the imported image to run")
        with anyio.fail_after(60):
            while True:
                async with docker_adapter.logs(pr.WorkloadRef("imported", "app")) as stream:
                    log = await pr.read_all(stream)
                if log:
                    break
                await anyio.sleep(0.1)
        assert log == b"imported offline\n"
    finally:
        await docker_adapter.destroy(pr.BundleRef("imported"))
        await harness.docker("rmi", "--force", name, check=False)


async def test_a_bad_archive_is_refused_with_its_reason(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    # As sets: the engine lists images made in the same second in no fixed order.
    before = set((await harness.docker("images", "-q", "--no-trunc")).split())
    with pytest.raises(pr.InvalidInput) as caught:
        await docker_adapter.import_image(pr.BytesReceiveStream(b"not an image archive" * 600))
    assert caught.value.problems[0].path == "archive"
    assert set((await harness.docker("images", "-q", "--no-trunc")).split()) == before


async def test_has_image_knows_what_the_daemon_can_start(docker_adapter: DockerAdapter) -> None:
    assert await docker_adapter.has_image(BUSYBOX)
    assert not await docker_adapter.has_image(UNPULLABLE)
    assert not await docker_adapter.has_image("sha256:" + "0" * 64)
