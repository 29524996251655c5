"""Bad input and a missing daemon: coded errors, nothing written, nothing of others touched."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

SLEEP = ("sh", "-c", "trap 'exit 143' TERM; while :; do sleep 0.2; done")


async def test_a_missing_socket_is_unavailable_with_a_remedy_naming_the_setting(
    tmp_path: Path,
) -> None:
    host = f"unix://{tmp_path}/absent.sock"
    adapter = DockerAdapter({"host": host})
    with pytest.raises(pr.AdapterUnavailable) as caught:
        await adapter.health_check()
    assert caught.value.code == "ADAPTER_UNAVAILABLE"
    assert "no socket at that path" in caught.value.message
    assert "'host' setting" in caught.value.remedy
    with pytest.raises(pr.AdapterUnavailable):
        async with DockerAdapter({"host": host, "read_timeout": 2}):
            pass
    await adapter.aclose()


async def test_a_refused_socket_is_unavailable() -> None:
    # A socket bound but not listening refuses every connection.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        path = f"/tmp/pando-refused-{id(bound)}.sock"  # noqa: S108 - socket paths are short
        bound.bind(path)
        try:
            adapter = DockerAdapter({"host": f"unix://{path}"})
            with pytest.raises(pr.AdapterUnavailable) as caught:
                await adapter.health_check()
            assert "connection refused" in caught.value.message
            await adapter.aclose()
        finally:
            await anyio.Path(path).unlink()


async def test_methods_outside_the_block_say_how_to_use_the_adapter(docker_host: str) -> None:
    adapter = DockerAdapter({"host": docker_host})
    await adapter.health_check()  # control: the daemon answers
    with pytest.raises(pr.AdapterFailed) as caught:
        await adapter.observe(pr.BundleRef("anything"))
    assert "async with" in caught.value.remedy
    await adapter.aclose()


async def test_a_name_clash_with_a_foreign_container_writes_nothing_and_touches_nothing(
    docker_host: str, owner: str, harness: DockerHarness
) -> None:
    async with DockerAdapter(adapter_config(docker_host, owner)) as adapter:
        foreign = adapter.naming.container_name("clash", "web")
        foreign_id = (await harness.docker("run", "-d", "--name", foreign, BUSYBOX, *SLEEP)).strip()
        try:
            plan = pr.BundlePlan(
                bundle_id="clash",
                workloads=(
                    pr.WorkloadPlan(name="api", image=BUSYBOX, command=SLEEP),
                    pr.WorkloadPlan(name="web", image=BUSYBOX, command=SLEEP),
                ),
            )
            with pytest.raises(pr.AdapterFailed) as caught:
                await adapter.apply(plan)
            assert foreign in caught.value.message
            assert "not this adapter's" in caught.value.message
            assert caught.value.details["status"] == 409
            # Nothing of this apply is kept, the other container is untouched.
            label = f"label=io.pando.owner={owner}"
            assert (await harness.docker("ps", "-aq", "--filter", label)).split() == []
            assert (await harness.docker("network", "ls", "-q", "--filter", label)).split() == []
            other = await harness.inspect(foreign)
            assert other["Id"] == foreign_id
            assert other["State"]["Running"]
            assert not (await adapter.observe(pr.BundleRef("clash"))).exists
        finally:
            await harness.docker("rm", "-f", foreign_id, check=False)
            await harness.remove_owned(owner)


async def test_an_http_health_check_is_refused_with_its_path_and_nothing_is_written(
    docker_adapter: DockerAdapter, harness: DockerHarness, owner: str
) -> None:
    plan = pr.BundlePlan(
        bundle_id="badhealth",
        workloads=(
            pr.WorkloadPlan(
                name="web",
                image=BUSYBOX,
                command=SLEEP,
                ports=(pr.Port(8080),),
                health=pr.HealthCheck(http_path="/healthz", port=8080),
            ),
        ),
    )
    with pytest.raises(pr.InvalidPlan) as caught:
        await docker_adapter.apply(plan)
    assert [p.path for p in caught.value.problems] == ["workloads[0].health.http_path"]
    label = f"label=io.pando.owner={owner}"
    assert (await harness.docker("ps", "-aq", "--filter", label)).split() == []
    assert (await harness.docker("network", "ls", "-q", "--filter", label)).split() == []
