"""Sandboxed apps on the real node: pods of a sandboxed plan run under gVisor, others under runc.

The real node's containerd has the handler ``runsc`` (runc's shim with gVisor's ``runsc``, through
the wrapper of ``localcluster.realnode.configs``) and the harness installs the RuntimeClass
``gvisor`` for it, as an operator would; the adapter finds it (no setting names it) and
declares the cluster sandboxed. What holds in the sandbox is shown on the one session cluster
with as few pods as show it (the kit's running-app mixins run sandboxed in
``test_conformance_real_node``); what is lost there (OOM kills, usage) is declared in
``docs/kubernetes.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _real import IMAGE, MARKS, new_id, serve, sh, wait_for
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import (
    AdapterUnavailable,
    BundlePlan,
    BundleRef,
    CapabilityUnsupported,
    ExecRequest,
    IsolationClass,
    LogOptions,
    Port,
    TrialRequest,
    WorkloadRef,
    read_all,
)

pytestmark = MARKS

SANDBOXED = IsolationClass.SANDBOXED


def _pod_spec(admin_api: Any, bundle: str, workload: str) -> dict[str, Any]:
    from kubernetes.client import CoreV1Api  # noqa: PLC0415

    pods = CoreV1Api(admin_api).list_namespaced_pod(
        f"pando-{bundle}", label_selector=f"pando.dev/workload={workload}"
    )
    return admin_api.sanitize_for_serialization(pods.items[0])["spec"]  # type: ignore[no-any-return]


async def test_a_sandboxed_app_sees_gvisor_and_an_ordinary_one_the_host_kernel(
    real_adapter: KubernetesAdapter, real_admin_api: Any
) -> None:
    caps = await real_adapter.capabilities()
    assert caps.isolation_class is SANDBOXED  # the RuntimeClass gvisor, found in the cluster
    boxed, plain = new_id("gv-boxed"), new_id("gv-plain")
    web = serve("web", 8080, ports=(Port(8080),))
    client = sh("client", "echo started-in-sandbox; sleep 3600", depends_on=("web",))
    ends = sh("ends", "echo bye; exit 3")
    await real_adapter.apply(
        BundlePlan(bundle_id=boxed, workloads=(web, client, ends), isolation=SANDBOXED)
    )
    await real_adapter.apply(BundlePlan(bundle_id=plain, workloads=(sh("peer", "sleep 3600"),)))
    try:
        observed = await wait_for(
            real_adapter,
            boxed,
            lambda o: o.workload("client").running and o.workload("ends").ended,
        )
        assert observed.workload("web").running
        assert observed.workload("ends").exit_code == 3
        await wait_for(real_adapter, plain, lambda o: o.all_running)
        assert _pod_spec(real_admin_api, boxed, "web")["runtimeClassName"] == "gvisor"
        assert _pod_spec(real_admin_api, plain, "peer")["runtimeClassName"] == "pando-real"

        kernel = ExecRequest(command=("sh", "-c", "uname -r; dmesg | head -n 3"))
        inside = await real_adapter.run(WorkloadRef(boxed, "client"), kernel)
        beside = await real_adapter.run(WorkloadRef(plain, "peer"), kernel)
        assert inside.exit_code == 0, inside
        release, *boot = inside.stdout.decode().splitlines()
        assert release.endswith("gvisor"), inside.stdout
        assert "gVisor" in "\n".join(boot)
        host_release = Path("/proc/sys/kernel/osrelease").read_text().strip()  # noqa: ASYNC240
        assert beside.stdout.decode().splitlines()[0] == host_release

        # Exec (exit codes, stderr) and logs hold in the sandbox; the pod network too.
        failed = await real_adapter.run(
            WorkloadRef(boxed, "client"), ExecRequest(command=("sh", "-c", "echo no >&2; exit 5"))
        )
        assert (failed.exit_code, failed.stderr) == (5, b"no\n")
        fetched = await real_adapter.run(
            WorkloadRef(boxed, "client"),
            ExecRequest(command=("wget", "-q", "-T", "5", "-O", "-", "http://web:8080/")),
        )
        assert (fetched.exit_code, fetched.stdout) == (0, b"ok-web\n"), fetched
        async with real_adapter.logs(WorkloadRef(boxed, "client"), LogOptions()) as stream:
            assert (await read_all(stream)).startswith(b"started-in-sandbox\n")
        async with real_adapter.logs(WorkloadRef(boxed, "ends"), LogOptions()) as stream:
            assert await read_all(stream) == b"bye\n"
        # Another app cannot reach the sandboxed one by its address (the app's policy, enforced
        # by kube-router on the node's side of the sandbox's interface).
        web_ip = _pod_ip(real_admin_api, boxed, "web")
        blocked = await real_adapter.run(
            WorkloadRef(plain, "peer"),
            ExecRequest(command=("wget", "-q", "-T", "3", "-O", "-", f"http://{web_ip}:8080/")),
        )
        assert blocked.exit_code != 0, blocked
        assert blocked.stdout == b""
    finally:
        await real_adapter.destroy(BundleRef(boxed))
        await real_adapter.destroy(BundleRef(plain))


def _pod_ip(admin_api: Any, bundle: str, workload: str) -> str:
    from kubernetes.client import CoreV1Api  # noqa: PLC0415

    pods = CoreV1Api(admin_api).list_namespaced_pod(
        f"pando-{bundle}", label_selector=f"pando.dev/workload={workload}"
    )
    return str(pods.items[0].status.pod_ip)


async def test_a_named_sandbox_class_that_is_missing_fails_health_and_refuses_sandboxed_plans(
    real_adapter_config: dict[str, Any], real_admin_api: Any
) -> None:
    from kubernetes.client import CoreV1Api  # noqa: PLC0415

    # trust_network_policy: no canary (its run is not what this test shows).
    config = {
        **real_adapter_config,
        "sandbox_runtime_class": "no-such-class",
        "trust_network_policy": True,
    }
    async with KubernetesAdapter(config) as adapter:
        with pytest.raises(AdapterUnavailable) as caught:
            await adapter.health_check()
        assert "'no-such-class'" in str(caught.value)
        assert "sandbox_runtime_class" in (caught.value.remedy or "")
        assert (await adapter.capabilities()).isolation_class is IsolationClass.CONTAINER
        bundle = new_id("gv-refused")
        plan = BundlePlan(bundle_id=bundle, workloads=(sh("w", "sleep 60"),), isolation=SANDBOXED)
        with pytest.raises(CapabilityUnsupported):
            await adapter.apply(plan)
    names = {n.metadata.name for n in CoreV1Api(real_admin_api).list_namespace().items}
    assert f"pando-{bundle}" not in names  # nothing written


async def test_a_sandboxed_trial_runs_under_gvisor_with_its_ports_unobserved(
    real_adapter: KubernetesAdapter,
) -> None:
    result = await real_adapter.trial(
        TrialRequest(
            trial_id=new_id("gv-trial"),
            image=IMAGE,
            entrypoint=("sh", "-c", "uname -r; exit 4"),
            isolation_floor=SANDBOXED,
            timeout_seconds=30,
        )
    )
    assert (result.started, result.exit_code) == (True, 4)
    assert result.log == b"4.19.0-gvisor\n"
    assert result.observed_ports == ()  # no observer beside a sandbox: not observed
