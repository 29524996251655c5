"""What the Docker adapter does, seen in the containers themselves (a real engine).

Each block is paired with a control that shows the target answers: the value that must not
leak is really in the container, the name that must not resolve has a twin that does.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import anyio
import pytest
from _docker_harness import DockerHarness
from _docker_tests import name_of, running, until, workload
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr
from pando_runtime.plugin import APP_CAPABILITIES

# What these tests show is the same on either backend; the kit runs on both (its streams).
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def test_env_reaches_the_container_and_secrets_reach_nothing_else(
    docker_adapter: DockerAdapter, harness: DockerHarness, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "s3cret-value-7f3a"  # noqa: S105 - the value that must not leak
    plan = pr.BundlePlan(
        bundle_id="envapp",
        workloads=(workload("web", env={"API_TOKEN": secret, "GREETING": "hello"}),),
    )
    with caplog.at_level(logging.DEBUG, logger="pando_runtime.docker"):
        await docker_adapter.apply(plan)
        observed = await until(docker_adapter, "envapp", running, "the workload to run")
    name = name_of(docker_adapter, "envapp", "web")
    # Control: the value is really in the container's environment.
    printed = await harness.docker("exec", name, "sh", "-c", 'echo "$API_TOKEN/$GREETING"')
    assert printed.strip() == f"{secret}/hello"
    inspected = await harness.inspect(name)
    assert secret not in repr(inspected["Config"]["Labels"])
    network = await harness.inspect(docker_adapter.naming.network_name("envapp"))
    assert secret not in repr(network["Labels"])
    assert secret not in repr(observed)
    assert secret not in pr.to_json(observed)
    assert secret not in caplog.text
    async with docker_adapter.logs(pr.WorkloadRef("envapp", "web")) as stream:
        log = b"".join([chunk async for chunk in stream])
    assert secret.encode() not in log


async def test_files_are_in_place_before_the_workload_starts(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    files = (
        pr.CarriedFile("/etc/app/conf.d/app.conf", b"port=8080\n", mode=0o640),
        pr.CarriedFile("/srv/index.html", b"<p>hi</p>\n"),
    )
    # PID 1 reads the file as its first act: it exists before the start, not after.
    command = ("sh", "-c", "cat /etc/app/conf.d/app.conf; exec sleep 600")
    plan = pr.BundlePlan(
        bundle_id="files", workloads=(workload("web", command=command, files=files),)
    )
    await docker_adapter.apply(plan)
    await until(docker_adapter, "files", running, "the workload to run")
    name = name_of(docker_adapter, "files", "web")
    with anyio.fail_after(30):
        while "port=8080" not in await harness.docker("logs", name):  # noqa: ASYNC110
            await anyio.sleep(0.1)
    mode = await harness.docker("exec", name, "stat", "-c", "%a", "/etc/app/conf.d/app.conf")
    assert mode.strip() == "640"
    content = await harness.docker("exec", name, "cat", "/srv/index.html")
    assert content == "<p>hi</p>\n"


async def test_the_container_gets_its_limits_log_cap_and_no_restart_policy(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    plan = pr.BundlePlan(
        bundle_id="limits",
        workloads=(
            workload(
                "web",
                resources=pr.Resources(cpu_millis=500, memory_bytes=64 * 1024**2),
                log_bytes=2 * 1024**2,
                health=pr.HealthCheck(command=("true",), interval_seconds=1),
            ),
            workload("plain"),
        ),
    )
    await docker_adapter.apply(plan)
    await until(docker_adapter, "limits", running, "the workloads to run")
    limited = (await harness.inspect(name_of(docker_adapter, "limits", "web")))["HostConfig"]
    assert limited["Memory"] == 64 * 1024**2
    assert limited["NanoCpus"] == 500_000_000
    assert limited["PidsLimit"] == 4096
    assert limited["RestartPolicy"]["Name"] == "no"
    assert limited["LogConfig"] == {
        "Type": "json-file",
        "Config": {"max-file": "2", "max-size": str(1024**2)},
    }
    plain = (await harness.inspect(name_of(docker_adapter, "limits", "plain")))["HostConfig"]
    assert plain["Memory"] == 0  # control: no limit where the plan sets none
    assert plain["LogConfig"]["Config"]["max-size"] == str(5 * 1024**2)
    healthy = await until(
        docker_adapter,
        "limits",
        lambda o: o.workload("web").healthy is True,
        "the health check to pass",
    )
    assert healthy.workload("plain").healthy is None


async def test_an_oom_kill_is_reported_and_a_control_under_the_same_limit_runs(
    docker_adapter: DockerAdapter,
) -> None:
    hog = ("sh", "-c", "x=0123456789abcdef; while :; do x=$x$x; done")
    limit = pr.Resources(memory_bytes=24 * 1024**2)
    plan = pr.BundlePlan(
        bundle_id="oom",
        workloads=(
            workload("hog", command=hog, resources=limit),
            workload("calm", resources=limit),
        ),
    )
    await docker_adapter.apply(plan)
    observed = await until(
        docker_adapter, "oom", lambda o: o.workload("hog").exit_code is not None, "the OOM kill"
    )
    hog_state = observed.workload("hog")
    assert hog_state.oom_killed
    assert hog_state.exit_code == 137
    assert not hog_state.running
    assert observed.workload("calm").running
    assert not observed.workload("calm").oom_killed


async def test_exits_keep_their_code_and_nothing_restarts_them(
    docker_adapter: DockerAdapter,
) -> None:
    plan = pr.BundlePlan(
        bundle_id="exits",
        workloads=(
            workload("seven", command=("sh", "-c", "exit 7")),
            workload("zero", command=("true",)),
        ),
    )
    await docker_adapter.apply(plan)
    ended = await until(
        docker_adapter,
        "exits",
        lambda o: all(w.exit_code is not None for w in o.workloads) and len(o.workloads) == 2,
        "both workloads to end",
    )
    assert ended.workload("seven").exit_code == 7
    assert ended.workload("zero").exit_code == 0
    await anyio.sleep(1.5)
    later = await docker_adapter.observe(pr.BundleRef("exits"))
    assert later.workload("seven").instance_id == ended.workload("seven").instance_id
    assert not later.workload("seven").running


async def test_reapply_makes_no_call_and_a_changed_command_recreates_only_that_workload(
    docker_adapter: DockerAdapter,
) -> None:
    plan = pr.BundlePlan(
        bundle_id="calls",
        workloads=(workload("web"), workload("worker"), workload("cron")),
    )
    before = docker_adapter.stats
    await docker_adapter.apply(plan)
    first = docker_adapter.stats
    writes = {k: v - before.calls_by_kind.get(k, 0) for k, v in first.calls_by_kind.items()}
    assert writes["POST /containers/create"] == 3
    assert writes["POST /containers/{id}/start"] == 3
    assert writes["POST /networks/create"] == 1
    started = await until(docker_adapter, "calls", running, "every workload to run")
    settled = docker_adapter.stats
    await docker_adapter.apply(plan)
    for _ in range(10):
        await docker_adapter.observe(pr.BundleRef("calls"))
    assert docker_adapter.stats.calls == settled.calls, "re-apply and observe make no call"
    changed = pr.BundlePlan(
        bundle_id="calls",
        workloads=(
            workload("web"),
            workload(
                "worker", command=("sh", "-c", "trap 'exit 143' TERM; while :; do sleep 1; done")
            ),
            workload("cron"),
        ),
    )
    await docker_adapter.apply(changed)
    after = docker_adapter.stats
    delta = {
        k: v - settled.calls_by_kind.get(k, 0)
        for k, v in after.calls_by_kind.items()
        if v != settled.calls_by_kind.get(k, 0)
    }
    assert delta.get("POST /containers/create") == 1
    assert delta.get("DELETE /containers/{id}") == 1
    assert delta.get("POST /containers/{id}/start") == 1
    assert "POST /networks/create" not in delta
    now = await until(
        docker_adapter,
        "calls",
        lambda o: (
            running(o)
            and o.workload("worker").instance_id != started.workload("worker").instance_id
        ),
        "the worker to be replaced",
    )
    assert now.workload("web").instance_id == started.workload("web").instance_id
    assert now.workload("cron").instance_id == started.workload("cron").instance_id


async def test_workloads_find_each_other_by_name_and_not_another_apps(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    one = pr.BundlePlan(bundle_id="dns-one", workloads=(workload("web"), workload("client")))
    two = pr.BundlePlan(bundle_id="dns-two", workloads=(workload("db"),))
    await docker_adapter.apply(one)
    await docker_adapter.apply(two)
    await until(docker_adapter, "dns-one", running, "app one to run")
    await until(docker_adapter, "dns-two", running, "app two to run")
    client = name_of(docker_adapter, "dns-one", "client")
    web = await harness.inspect(name_of(docker_adapter, "dns-one", "web"))
    address = web["NetworkSettings"]["Networks"][docker_adapter.naming.network_name("dns-one")][
        "IPAddress"
    ]
    found = await harness.docker("exec", client, "nslookup", "web")
    assert address in found
    # Control for isolation: app two's workload is not a name app one can resolve.
    missing = await harness.docker("exec", client, "nslookup", "db", check=False)
    db = await harness.inspect(name_of(docker_adapter, "dns-two", "db"))
    networks = db["NetworkSettings"]["Networks"]
    db_address = networks[docker_adapter.naming.network_name("dns-two")]["IPAddress"]
    assert db_address not in missing
    upstream = docker_adapter.upstream(pr.WorkloadRef("dns-one", "web"), 8080)
    assert upstream.url == f"http://{address}:8080"


async def test_stop_keeps_containers_and_logs_destroy_removes_everything(
    docker_adapter: DockerAdapter, harness: DockerHarness, owner: str
) -> None:
    # "booted" is printed once the trap is set: a SIGTERM before it would kill the shell (137),
    # which a busy machine showed; the stop waits for it instead of assuming the order.
    command = ("sh", "-c", "trap 'exit 143' TERM; echo booted; while :; do sleep 0.2; done")
    plan = pr.BundlePlan(bundle_id="life", workloads=(workload("web", command=command),))
    await docker_adapter.apply(plan)
    await until(docker_adapter, "life", running, "the workload to run")
    with anyio.fail_after(60):
        while True:
            async with docker_adapter.logs(pr.WorkloadRef("life", "web")) as stream:
                if b"booted" in b"".join([chunk async for chunk in stream]):
                    break
            await anyio.sleep(0.1)
    await docker_adapter.stop(pr.BundleRef("life"))
    stopped = await docker_adapter.observe(pr.BundleRef("life"))
    assert not stopped.workload("web").running
    assert stopped.workload("web").exit_code == 143
    async with docker_adapter.logs(pr.WorkloadRef("life", "web")) as stream:
        log = b"".join([chunk async for chunk in stream])
    assert b"booted" in log
    await docker_adapter.destroy(pr.BundleRef("life"))
    gone = await docker_adapter.observe(pr.BundleRef("life"))
    assert not gone.exists
    label = f"label=io.pando.owner={owner}"
    assert (await harness.docker("ps", "-aq", "--filter", label)).split() == []
    assert (await harness.docker("network", "ls", "-q", "--filter", label)).split() == []


async def test_a_tty_session_is_resized_and_stdin_ends_with_a_half_close(
    docker_adapter: DockerAdapter,
) -> None:
    plan = pr.BundlePlan(bundle_id="tty", workloads=(workload("web"),))
    await docker_adapter.apply(plan)
    await until(docker_adapter, "tty", running, "the workload to run")
    ref = pr.WorkloadRef("tty", "web")
    request = pr.ExecRequest(command=("sh", "-c", "read line; stty size"), tty=True, stdin=True)
    with anyio.fail_after(30):
        async with docker_adapter.exec(ref, request) as session:
            await session.resize(33, 101)
            assert session.stdin is not None
            await session.stdin.send(b"go\n")
            out = b"".join([chunk async for chunk in session.stdout])
            code = await session.wait()
    assert b"33 101" in out
    assert code == 0
    # Control: without a TTY, stty has no terminal and says so on stderr.
    plain = await docker_adapter.run(ref, pr.ExecRequest(command=("stty", "size")))
    assert plain.exit_code != 0
    assert plain.stderr


async def test_logs_since_a_moment_leave_out_what_came_before(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    plan = pr.BundlePlan(
        bundle_id="since",
        workloads=(workload("web", command=("sh", "-c", "echo early; exec sleep 600")),),
    )
    await docker_adapter.apply(plan)
    await until(docker_adapter, "since", running, "the workload to run")
    ref = pr.WorkloadRef("since", "web")
    name = name_of(docker_adapter, "since", "web")
    with anyio.fail_after(30):
        while "early" not in await harness.docker("logs", name):  # noqa: ASYNC110
            await anyio.sleep(0.1)
    await anyio.sleep(0.2)  # a moment strictly between the two lines (ns timestamps)
    moment = datetime.now(UTC)
    await anyio.sleep(0.2)
    await harness.docker("exec", name, "sh", "-c", "echo late > /proc/1/fd/1")
    async with docker_adapter.logs(ref, pr.LogOptions(since=moment)) as stream:
        later = b"".join([chunk async for chunk in stream])
    async with docker_adapter.logs(ref) as stream:
        everything = b"".join([chunk async for chunk in stream])
    assert later == b"late\n"
    assert everything == b"early\nlate\n"  # control: both lines are in the log


async def test_leaving_an_exec_block_early_ends_the_session_cleanly(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    plan = pr.BundlePlan(bundle_id="early", workloads=(workload("web"),))
    await docker_adapter.apply(plan)
    await until(docker_adapter, "early", running, "the workload to run")
    ref = pr.WorkloadRef("early", "web")
    request = pr.ExecRequest(command=("sh", "-c", "echo started; sleep 30"), stdin=True)
    with anyio.fail_after(20):
        async with docker_adapter.exec(ref, request) as session:
            first = await session.stdout.receive()
    assert first == b"started\n"
    with anyio.move_on_after(0.5) as scope, anyio.fail_after(20):
        async with docker_adapter.exec(ref, pr.ExecRequest(command=("sleep", "30"))) as session:
            await session.wait()
    assert scope.cancelled_caught  # the host's cancellation ends the wait, nothing hangs
    # Control: the workload is untouched and a new command still runs.
    done = await docker_adapter.run(ref, pr.ExecRequest(command=("echo", "still here")))
    assert done.stdout == b"still here\n"


async def test_first_applies_at_once_each_get_a_network_of_their_own(
    docker_adapter: DockerAdapter,
) -> None:
    # A host applies new apps concurrently: each first apply carves a subnet, and those in
    # flight must not pick the same one (they did: "taken by other writers each time").
    ids = [f"burst{i}" for i in range(8)]
    async with anyio.create_task_group() as group:
        for bundle_id in ids:
            plan = pr.BundlePlan(bundle_id=bundle_id, workloads=(workload("web"),))
            group.start_soon(docker_adapter.apply, plan)
    for bundle_id in ids:
        await until(docker_adapter, bundle_id, running, f"{bundle_id} to run")
    networks = {docker_adapter.cache.bundle(bundle_id).network_id for bundle_id in ids}
    assert len(networks) == len(ids)
    for bundle_id in ids:
        await docker_adapter.destroy(pr.BundleRef(bundle_id))


def _status(text: str) -> dict[str, str]:
    fields = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in fields}


async def test_workloads_run_hardened_and_get_what_their_plan_asks(
    docker_adapter: DockerAdapter, harness: DockerHarness
) -> None:
    caps = await docker_adapter.capabilities()
    assert caps.default_capabilities == APP_CAPABILITIES
    assert "NET_RAW" in caps.grantable_capabilities
    raw = pr.Privileges(capabilities=("NET_RAW",))
    plan = pr.BundlePlan(
        bundle_id="hardened", workloads=(workload("plain"), workload("pinger", privileges=raw))
    )
    await docker_adapter.apply(plan)
    await until(docker_adapter, "hardened", running, "the workloads to run")
    app_mask = sum(1 << CAPABILITY_BITS[name] for name in APP_CAPABILITIES)
    plain = name_of(docker_adapter, "hardened", "plain")
    status = _status(await harness.docker("exec", plain, "cat", "/proc/self/status"))
    assert status["Seccomp"] == "2", "the Engine's default profile"
    assert status["NoNewPrivs"] == "1"
    assert int(status["CapEff"], 16) == app_mask
    assert int(status["CapBnd"], 16) == app_mask
    pinger = name_of(docker_adapter, "hardened", "pinger")
    granted = _status(await harness.docker("exec", pinger, "cat", "/proc/self/status"))
    assert int(granted["CapEff"], 16) == app_mask | 1 << CAPABILITY_BITS["NET_RAW"]
    assert granted["NoNewPrivs"] == "1"
    await docker_adapter.destroy(pr.BundleRef("hardened"))


CAPABILITY_BITS = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6,
    "SETUID": 7, "NET_BIND_SERVICE": 10, "NET_RAW": 13,
}  # fmt: skip
"""Bit numbers of the capabilities named here (``linux/capability.h``)."""
