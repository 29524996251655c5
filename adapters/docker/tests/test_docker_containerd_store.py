"""Images and volumes on an engine that keeps its images in containerd's store (the daemon's
``containerd-snapshotter`` feature: opt-in on 27 and 28, the default of fresh 29 installs).

There an image's ID is the digest of its manifest or index, not of its config, and a load
reports a failed unpack as a line of a successful answer. One engine of the built release (28.5,
on Debian's containerd 1.6, the ``overlayfs`` snapshotter) runs the kit's volumes (the helper
container's image, its snapshot and restore archives) and the adapter's image import and lookups
(``test_docker_images.py``, the same tests), on asyncio alone: which loop drives the adapter has
nothing to do with the store.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _docker_harness import DockerHarness
from _docker_tests import ENV_HOST, adapter_config
from localcluster import images
from localdocker.engine import CONTAINERD_SNAPSHOTTER
from localdocker.engines import built_version
from localdocker.pytest_plugin import open_engine, releases
from pando_runtime_docker import DockerAdapter
from test_docker_images import (
    test_a_bad_archive_is_refused_with_its_reason,
    test_an_imported_archive_runs_by_the_id_import_returns,
    test_has_image_knows_what_the_daemon_can_start,
)

import pando_runtime as pr
from pando_runtime.testing.conformance import ConformanceHarness, VolumeConformance

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

__all__ = [
    "test_a_bad_archive_is_refused_with_its_reason",
    "test_an_imported_archive_runs_by_the_id_import_returns",
    "test_has_image_knows_what_the_daemon_can_start",
]


@pytest.fixture(scope="module")
def docker_host(request: pytest.FixtureRequest) -> Iterator[str]:
    """This module's engine, in place of the session's: the built release with containerd's
    image store, the busybox image loaded."""
    if os.environ.get(ENV_HOST):
        pytest.skip("these tests start an engine of their own configuration")
    if built_version() not in releases(request.config):
        pytest.skip(f"Docker Engine {built_version()} is not among --docker-engines")
    engine: Any = open_engine(
        request,
        "docker-containerd-store",
        release=built_version(),
        features={CONTAINERD_SNAPSHOTTER: True},
    )
    try:
        info = engine.api.checked("GET", "/info").json()
        assert ["driver-type", "io.containerd.snapshotter.v1"] in info["DriverStatus"], info
        yield f"unix://{engine.socket_path}"
    finally:
        engine.close()


class TestContainerdStoreVolumes(VolumeConformance):
    @pytest.fixture
    async def adapter(self, docker_host: str, owner: str) -> AsyncIterator[DockerAdapter]:
        async with DockerAdapter(adapter_config(docker_host, owner)) as adapter:
            try:
                yield adapter
            finally:
                await DockerHarness(docker_host).remove_owned(owner)

    @pytest.fixture
    def harness(self, docker_host: str) -> ConformanceHarness:
        return DockerHarness(docker_host)


async def test_an_archive_whose_layer_is_not_its_config_s_is_refused_and_not_kept(
    docker_adapter: DockerAdapter, harness: DockerHarness, tmp_path: Path
) -> None:
    # The containerd store keeps such an image and says it could not unpack it in a line of a
    # successful answer (the classic store refuses the load with an error object).
    name = f"pando.test/broken-{uuid.uuid4().hex[:8]}:1"
    spec = images.ImageSpec(name, files={"/hello": b"hello\n"}, cmd=("/hello",))
    broken = images.build(spec, tmp_path, diff_id="sha256:" + "1" * 64)
    with pytest.raises(pr.InvalidInput) as caught:
        await docker_adapter.import_image(pr.BytesReceiveStream(broken.archive.read_bytes()))
    problem = caught.value.problems[0]
    assert (problem.path, problem.code) == ("archive", "bad_image_archive")
    assert "wrong diff id" in problem.message, problem.message
    assert not await docker_adapter.has_image(name)
    assert name not in await harness.docker("images", "--format", "{{.Repository}}:{{.Tag}}")
