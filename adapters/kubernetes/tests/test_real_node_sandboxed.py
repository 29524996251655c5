"""Sandboxed apps on the real node: pods of a sandboxed plan run under gVisor, others under runc.

The real node's containerd has the handler ``runsc`` (gVisor's own shim) and the harness
installs the RuntimeClass ``gvisor`` for it, as an operator would; the adapter finds it (no
setting names it) and declares the cluster sandboxed. Each test shows what holds inside the
sandbox, on the one session cluster, with as few pods as show it.
"""

from __future__ import annotations

from typing import Any

from _real import IMAGE, MARKS, new_id, serve, sh, wait_for
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import (
    BundlePlan,
    BundleRef,
    ExecRequest,
    IsolationClass,
    LogOptions,
    Port,
    Resources,
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
    await real_adapter.apply(
        BundlePlan(bundle_id=boxed, workloads=(web, client), isolation=SANDBOXED)
    )
    await real_adapter.apply(BundlePlan(bundle_id=plain, workloads=(sh("peer", "sleep 3600"),)))
    try:
        await wait_for(real_adapter, boxed, lambda o: o.all_running)
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
        host_release = open("/proc/sys/kernel/osrelease").read().strip()  # noqa: ASYNC230, PTH123
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
        # Another app cannot reach the sandboxed one by its address (the app's policy, enforced
        # by kube-router on the node's side of the sandbox's interface).
        web_ip = _pod_ip(real_admin_api, boxed, "web")
        blocked = await real_adapter.run(
            WorkloadRef(plain, "peer"),
            ExecRequest(command=("wget", "-q", "-T", "3", "-O", "-", f"http://{web_ip}:8080/")),
        )
        assert blocked.exit_code != 0 and blocked.stdout == b"", blocked
    finally:
        await real_adapter.destroy(BundleRef(boxed))
        await real_adapter.destroy(BundleRef(plain))


def _pod_ip(admin_api: Any, bundle: str, workload: str) -> str:
    from kubernetes.client import CoreV1Api  # noqa: PLC0415

    pods = CoreV1Api(admin_api).list_namespaced_pod(
        f"pando-{bundle}", label_selector=f"pando.dev/workload={workload}"
    )
    return str(pods.items[0].status.pod_ip)


async def test_a_sandboxed_exit_and_oom_kill_are_observed(
    real_adapter: KubernetesAdapter,
) -> None:
    bundle = new_id("gv-fail")
    mib = 1024 * 1024
    plan = BundlePlan(
        bundle_id=bundle,
        isolation=SANDBOXED,
        workloads=(
            sh("exits", "echo bye; exit 3"),
            sh(
                "greedy",
                "sleep 1; exec dd if=/dev/zero of=/dev/null bs=96M count=1",
                resources=Resources(memory_bytes=32 * mib),
            ),
        ),
    )
    await real_adapter.apply(plan)
    try:
        observed = await wait_for(
            real_adapter, bundle, lambda o: all(w.ended for w in o.workloads), timeout=90
        )
        exits, greedy = observed.workload("exits"), observed.workload("greedy")
        assert (exits.exit_code, exits.oom_killed) == (3, False)
        assert (greedy.exit_code, greedy.oom_killed) == (137, True), greedy
    finally:
        await real_adapter.destroy(BundleRef(bundle))


async def test_a_sandboxed_trial_runs_under_gvisor_unobserved(
    real_adapter: KubernetesAdapter,
) -> None:
    result = await real_adapter.trial(
        TrialRequest(
            trial_id=new_id("gv-trial"),
            image=IMAGE,
            entrypoint=("sh", "-c", "uname -r; nc -l -p 9000 & sleep 3; exit 4"),
            isolation_floor=SANDBOXED,
            timeout_seconds=30,
        )
    )
    assert result.started
    assert result.exit_code == 4
    assert result.log.decode().splitlines()[0].endswith("gvisor"), result.log
    assert result.observed_ports == ()  # its sockets are the sandbox's: not observed
