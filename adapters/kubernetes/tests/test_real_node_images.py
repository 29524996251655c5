"""Images on a real node: imported into the local registry, pulled with the app's pull
secret, and a pull that cannot work observed as what it is.

The registry is the real-node cluster's (CNCF Distribution on loopback with TLS and a
password); the node's containerd reaches it through the harness's relay, as
``127.0.0.1:<port>`` like the host does, so one reference serves both.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from _real import MARKS, new_id, wait_for
from localcluster import images
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import (
    AdapterFailed,
    BundlePlan,
    BundleRef,
    BytesReceiveStream,
    InvalidPlan,
    LogOptions,
    RegistryAuth,
    WorkloadPlan,
    WorkloadProblem,
    WorkloadRef,
    read_all,
)

pytestmark = MARKS


def _greeter(tmp_path: Path) -> bytes:
    """An image archive of our own: busybox whose command prints a greeting and stays up."""
    built = images.build_image(
        "pando.test/greeter:1",
        base=images.busybox_spec(),
        files={"/greeting": b"hello from an imported image\n"},
        entrypoint=("sh", "-c", "cat /greeting; exec sleep 3600"),
        directory=tmp_path,
    )
    return built.archive.read_bytes()


async def test_an_imported_image_is_pulled_with_the_apps_credentials_and_runs(
    real_adapter: KubernetesAdapter, tmp_path: Path
) -> None:
    caps = await real_adapter.capabilities()
    assert caps.supports("image_import")
    reference = await real_adapter.import_image(BytesReceiveStream(_greeter(tmp_path)))
    registry = real_adapter.config.image_registry
    assert registry is not None
    assert reference.startswith(f"{registry}/")
    assert "@sha256:" in reference
    assert await real_adapter.has_image(reference)
    assert not await real_adapter.has_image(reference.rsplit("@", 1)[0] + "@sha256:" + "0" * 64)

    bundle = new_id("imported")
    # No pull_auth in the plan: the adapter gives the app the registry's credentials.
    plan = BundlePlan(bundle_id=bundle, workloads=(WorkloadPlan(name="app", image=reference),))
    await real_adapter.apply(plan)
    try:
        observed = await wait_for(real_adapter, bundle, lambda o: o.all_running, timeout=90)
        assert observed.workload("app").image_digest is not None
        assert reference.rsplit("@", 1)[1] in (observed.workload("app").image_digest or "")
        async with real_adapter.logs(WorkloadRef(bundle, "app"), LogOptions()) as stream:
            assert await read_all(stream) == b"hello from an imported image\n"
    finally:
        await real_adapter.destroy(BundleRef(bundle))


async def test_an_absent_image_and_a_refused_password_are_pull_problems(
    real_adapter: KubernetesAdapter, real_node_cluster: Any, tmp_path: Path
) -> None:
    registry = real_node_cluster.local.registry
    pushed = registry.push(_greeter(tmp_path), "pando/refused", "1")
    wrong = RegistryAuth(registry=registry.address, username=registry.username, password="nope")  # noqa: S106
    # Two apps: one app pulls from one registry with one credential (the adapter refuses two).
    absent_app, refused_app = new_id("absent"), new_id("refused")
    absent_image = f"{registry.address}/pando/absent:1"
    await real_adapter.apply(
        BundlePlan(bundle_id=absent_app, workloads=(WorkloadPlan(name="app", image=absent_image),))
    )
    refused_plan = WorkloadPlan(name="app", image=pushed.by_digest, pull_auth=wrong)
    await real_adapter.apply(BundlePlan(bundle_id=refused_app, workloads=(refused_plan,)))
    try:
        absent = (
            await wait_for(real_adapter, absent_app, lambda o: bool(o.workloads[0].problem))
        ).workloads[0]
        refused = (
            await wait_for(real_adapter, refused_app, lambda o: bool(o.workloads[0].problem))
        ).workloads[0]
        for workload in (absent, refused):
            assert workload.problem is WorkloadProblem.IMAGE_PULL
            assert (workload.present, workload.running, workload.exit_code) == (True, False, None)
        assert "not found" in absent.problem_detail.lower()
        assert "401" in refused.problem_detail or "unauthorized" in refused.problem_detail.lower()
        assert "nope" not in refused.problem_detail
        # The same image with the app's right credentials (the adapter's) pulls and runs.
        await real_adapter.apply(
            BundlePlan(
                bundle_id=refused_app, workloads=(WorkloadPlan(name="app", image=pushed.by_digest),)
            )
        )
        await wait_for(real_adapter, refused_app, lambda o: o.all_running, timeout=90)
    finally:
        await real_adapter.destroy(BundleRef(absent_app))
        await real_adapter.destroy(BundleRef(refused_app))


async def test_one_registry_with_two_credentials_in_one_app_is_refused(
    real_adapter: KubernetesAdapter, real_node_cluster: Any
) -> None:
    registry = real_node_cluster.local.registry
    image = f"{registry.address}/pando/any:1"
    wrong = RegistryAuth(registry=registry.address, username="someone", password="else")  # noqa: S106
    plan = BundlePlan(
        bundle_id=new_id("two-creds"),
        workloads=(
            WorkloadPlan(name="a", image=image),  # gets the adapter's credentials
            WorkloadPlan(name="b", image=image, pull_auth=wrong),
        ),
    )
    with pytest.raises(InvalidPlan) as raised:
        await real_adapter.apply(plan)
    assert [p.path for p in raised.value.problems] == ["workloads[1].pull_auth"]
    assert not (await real_adapter.observe(BundleRef(plan.bundle_id))).exists


async def test_a_wrong_registry_password_is_a_coded_error_that_never_shows_it(
    real_adapter_config: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "definitely-not-the-password"  # noqa: S105
    password_file = tmp_path / "password"
    password_file.write_text(secret + "\n")
    config = {**real_adapter_config, "image_registry_password_file": str(password_file)}
    caplog.set_level(logging.DEBUG)
    async with KubernetesAdapter(config) as adapter:
        with pytest.raises(AdapterFailed) as raised:
            await adapter.import_image(BytesReceiveStream(_greeter(tmp_path)))
    error = raised.value
    assert config["image_registry"] in str(error)
    for text in (str(error), repr(error), str(error.to_dict()), caplog.text):
        assert secret not in text
