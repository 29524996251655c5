"""Trial runs on a real engine: ports seen from the image's own namespace, writes, exit, log."""

from __future__ import annotations

import anyio
import pytest
from _docker_harness import BUSYBOX, UNPULLABLE, DockerHarness
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def trial(adapter: DockerAdapter, request: pr.TrialRequest) -> pr.TrialResult:
    with anyio.fail_after(120 + request.timeout_seconds):
        return await adapter.trial(request)


async def nothing_left(adapter: DockerAdapter, harness: DockerHarness) -> None:
    label = f"label=io.pando.helper={adapter.naming.owner}"
    assert (await harness.docker("ps", "-aq", "--filter", label)).split() == []
    assert (await harness.docker("network", "ls", "-q", "--filter", label)).split() == []


async def test_a_server_is_seen_on_its_ports_loopback_apart(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    script = (
        "mkdir -p /www && echo hi > /www/index.html && httpd -p 127.0.0.1:9090 -h /www && "
        "sleep 1 && echo serving && exec httpd -f -p 8080 -h /www"
    )
    result = await trial(
        docker_adapter,
        pr.TrialRequest(
            trial_id="server",
            image=BUSYBOX,
            command=("sh", "-c", script),
            declared_paths=("/www",),
            timeout_seconds=60,
        ),
    )
    assert result.started
    assert result.exit_code is None  # still serving when the trial ended
    assert pr.Port(8080) in result.observed_ports
    assert pr.Port(9090) in result.loopback_ports
    assert pr.Port(9090) not in result.observed_ports
    assert result.observed_writes == ()
    assert b"serving" in result.log
    await nothing_left(docker_adapter, harness)


async def test_writes_outside_the_declared_paths_and_the_exit_code(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    script = (
        "echo x > /etc/written; mkdir -p /var/lib/app && echo y > /var/lib/app/db; "
        "rm /etc/motd 2>/dev/null; echo done >&2; exit 3"
    )
    result = await trial(
        docker_adapter,
        pr.TrialRequest(
            trial_id="writer",
            image=BUSYBOX,
            command=("sh", "-c", script),
            declared_paths=("/var/lib/app",),
            timeout_seconds=30,
        ),
    )
    assert result.started
    assert result.exit_code == 3
    assert result.observed_writes == ("/etc/written",)
    assert result.observed_ports == ()
    assert result.log == b"done\n"
    await nothing_left(docker_adapter, harness)


async def test_an_image_that_cannot_be_pulled_does_not_start(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    result = await trial(
        docker_adapter, pr.TrialRequest(trial_id="absent", image=UNPULLABLE, timeout_seconds=5)
    )
    assert not result.started
    assert b"cannot be pulled" in result.log
    await nothing_left(docker_adapter, harness)
