"""Apps on a real node: containers really run, and what the adapter observes is what happened.

The cluster is the ``real_node_cluster`` fixture's: a kubelet on containerd and runc, pods on a
CNI bridge, kube-proxy, kube-router and CoreDNS, in network namespaces with no way out (see
``docs/local-control-plane.md``). Apps land there through the ``pando-real`` RuntimeClass.
"""

from __future__ import annotations

import anyio
from _real import MARKS, new_id, serve, sh, wait_for
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import (
    BundleEventKind,
    BundlePlan,
    BundleRef,
    CarriedFile,
    ExecRequest,
    LogOptions,
    Port,
    Resources,
    WorkloadRef,
    read_all,
)

pytestmark = MARKS


async def test_two_workloads_run_see_their_env_files_and_each_other(
    real_adapter: KubernetesAdapter,
) -> None:
    bundle = new_id("real-app")
    web = serve(
        "web",
        8080,
        ports=(Port(8080),),
        env={"GREETING": "hello", "API_TOKEN": "s3cret-value"},
        files=(
            CarriedFile(path="/etc/app/config.txt", content=b"colour=blue\n", mode=0o640),
            CarriedFile(path="/opt/tool/run.sh", content=b"#!/bin/sh\necho tool-ran\n", mode=0o755),
        ),
    )
    client = sh("client", "echo client-started; sleep 3600", depends_on=("web",))
    plan = BundlePlan(bundle_id=bundle, workloads=(web, client))
    await real_adapter.apply(plan)
    try:
        observed = await wait_for(real_adapter, bundle, lambda o: o.all_running)
        assert all(w.instance_id for w in observed.workloads)
        assert all(w.started_at is not None for w in observed.workloads)

        web_ref = WorkloadRef(bundle, "web")
        env = await real_adapter.run(web_ref, ExecRequest(command=("env",)))
        assert env.exit_code == 0
        lines = set(env.stdout.decode().splitlines())
        assert {"GREETING=hello", "API_TOKEN=s3cret-value"} <= lines

        stat = await real_adapter.run(
            web_ref,
            ExecRequest(command=("stat", "-c", "%a %n", "/etc/app/config.txt", "/opt/tool/run.sh")),
        )
        assert stat.stdout.decode().split("\n")[:2] == [
            "640 /etc/app/config.txt",
            "755 /opt/tool/run.sh",
        ]
        tool = await real_adapter.run(web_ref, ExecRequest(command=("/opt/tool/run.sh",)))
        assert (tool.exit_code, tool.stdout) == (0, b"tool-ran\n")
        config = await real_adapter.run(
            web_ref, ExecRequest(command=("cat", "/etc/app/config.txt"))
        )
        assert config.stdout == b"colour=blue\n"

        # The other workload by its name: DNS from CoreDNS, then HTTP over the pod network.
        client_ref = WorkloadRef(bundle, "client")
        fetched = await real_adapter.run(
            client_ref,
            ExecRequest(command=("wget", "-q", "-T", "5", "-O", "-", "http://web:8080/")),
        )
        assert (fetched.exit_code, fetched.stdout) == (0, b"ok-web\n"), fetched

        failed = await real_adapter.run(
            client_ref, ExecRequest(command=("sh", "-c", "echo oops >&2; exit 7"))
        )
        assert (failed.exit_code, failed.stderr) == (7, b"oops\n")

        async with real_adapter.logs(client_ref, LogOptions()) as stream:
            assert (await read_all(stream)).startswith(b"client-started\n")
    finally:
        await real_adapter.destroy(BundleRef(bundle))


async def test_an_exit_and_an_oom_kill_are_observed_as_what_they_are(
    real_adapter: KubernetesAdapter,
) -> None:
    bundle = new_id("real-fail")
    mib = 1024 * 1024
    plan = BundlePlan(
        bundle_id=bundle,
        workloads=(
            sh("exits", "echo bye; exit 3"),
            # dd fills a 96 MiB buffer: over the 32 MiB limit, the kernel kills it (as the
            # main process: on cgroup v1 the OOM killer ends the one process, not the group).
            sh(
                "greedy",
                "sleep 1; exec dd if=/dev/zero of=/dev/null bs=96M count=1",
                resources=Resources(memory_bytes=32 * mib),
            ),
        ),
    )
    async with real_adapter.watch_bundles() as events:
        await real_adapter.apply(plan)
        try:
            observed = await wait_for(
                real_adapter, bundle, lambda o: all(w.ended for w in o.workloads), timeout=90
            )
            exits, greedy = observed.workload("exits"), observed.workload("greedy")
            assert (exits.exit_code, exits.oom_killed) == (3, False)
            assert greedy.oom_killed
            assert greedy.exit_code == 137  # SIGKILL, from the kernel's OOM killer
            seen = {}
            with anyio.move_on_after(30):
                async for event in events:
                    if event.bundle_id == bundle and event.kind in {
                        BundleEventKind.EXITED,
                        BundleEventKind.OOM_KILLED,
                    }:
                        seen[event.workload] = (event.kind, event.exit_code)
                    if len(seen) == 2:
                        break
            assert seen == {
                "exits": (BundleEventKind.EXITED, 3),
                "greedy": (BundleEventKind.OOM_KILLED, 137),
            }
            async with real_adapter.logs(WorkloadRef(bundle, "exits"), LogOptions()) as stream:
                assert await read_all(stream) == b"bye\n"
        finally:
            await real_adapter.destroy(BundleRef(bundle))
