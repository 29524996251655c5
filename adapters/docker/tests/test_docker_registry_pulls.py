"""Pulls with per-app credentials from a real registry (htpasswd over TLS) the engine reaches.

The registry is the tests' own (``localcluster.registry``); the engine reaches it through a
port on its own namespace's loopback (``_registry_bridge``), so no packet leaves the machine.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _docker_harness import DockerHarness
from _docker_tests import running, until, workload
from _registry_bridge import RegistryBridge
from localcluster.registry import LocalRegistry
from localdocker import build_image
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


@pytest.fixture(scope="module")
def registry(docker_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The registry, an image pushed to it, and its address as the engine sees it."""
    work = tmp_path_factory.mktemp("registry")
    built = build_image(
        "pando.test/pulled:1",
        files={"/etc/pando-test": b"pulled with credentials\n"},
        cmd=("sh", "-c", "cat /etc/pando-test; exec sleep 600"),
        directory=work / "image",
    )
    with LocalRegistry(work / "registry") as local:
        local.push(built.archive, "pando/pulled", "1")
        with RegistryBridge(docker_engine, local.port).running() as bridge:
            yield local, bridge


def credentials(registry: Any, password: str | None = None) -> pr.RegistryAuth:
    local, bridge = registry
    return pr.RegistryAuth(
        registry=bridge.address, username=local.username, password=password or local.password
    )


def pull_plan(bundle_id: str, image: str, auth: pr.RegistryAuth | None) -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=bundle_id,
        workloads=(workload("app", image=image, command=(), pull_auth=auth),),
    )


async def test_an_image_is_pulled_with_the_apps_credentials_and_runs(
    docker_adapter: DockerAdapter,
    harness: DockerHarness,
    registry: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    local, bridge = registry
    image = f"{bridge.address}/pando/pulled:1"
    await harness.docker("rmi", "--force", image, check=False)
    assert not await docker_adapter.has_image(image)  # no anonymous access
    with caplog.at_level(logging.DEBUG, logger="pando_runtime.docker"):
        await docker_adapter.apply(pull_plan("pulled", image, credentials(registry)))
        observed = await until(docker_adapter, "pulled", running, "the pulled image to run")
    assert observed.workload("app").image_digest == (await harness.inspect(image))["Id"]
    assert local.password not in caplog.text
    assert local.password not in pr.to_json(observed)
    await docker_adapter.destroy(pr.BundleRef("pulled"))
    await harness.docker("rmi", "--force", image, check=False)


@pytest.mark.parametrize("case", ["wrong password", "absent image", "no credentials"])
async def test_a_refused_pull_is_the_image_pull_problem(
    docker_adapter: DockerAdapter, registry: Any, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, bridge = registry
    wrong = f"wrong-{uuid.uuid4().hex}"
    image = f"{bridge.address}/pando/pulled:1"
    auth: pr.RegistryAuth | None = credentials(registry)
    if case == "wrong password":
        auth = credentials(registry, password=wrong)
    elif case == "absent image":
        image = f"{bridge.address}/pando/absent:1"
    else:
        auth = None
    bundle_id = f"refused-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.DEBUG, logger="pando_runtime.docker"):
        await docker_adapter.apply(pull_plan(bundle_id, image, auth))
        observed = await until(
            docker_adapter,
            bundle_id,
            lambda o: o.workloads and o.workload("app").problem is not None,
            "the pull to be refused",
        )
    app = observed.workload("app")
    assert app.problem is pr.WorkloadProblem.IMAGE_PULL
    assert not app.running
    assert app.problem_detail
    assert wrong not in (app.problem_detail or "")
    assert wrong not in caplog.text
