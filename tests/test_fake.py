"""What the fake adapter offers host tests beyond the contract: controls and inspection."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import anyio
import attrs
import pytest

import pando_runtime as pr
from pando_runtime.testing import (
    ExecContext,
    FakeAdapter,
    FakeClock,
    FakeNode,
    ImageBehaviour,
    make_tar,
)

pytestmark = pytest.mark.anyio

GIB = 1024**3


def _plan(*workloads: pr.WorkloadPlan, bundle_id: str = "app") -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=bundle_id, workloads=workloads or (pr.WorkloadPlan(name="web", image="x/web:1"),)
    )


async def test_apply_is_idempotent_by_write_count() -> None:
    fake = FakeAdapter()
    plan = _plan()
    await fake.apply(plan)
    writes = fake.writes
    await fake.apply(plan)
    assert fake.writes == writes
    assert fake.instances_started(pr.WorkloadRef("app", "web")) == 1
    assert fake.calls["apply"] == 2


async def test_clock_drives_timestamps() -> None:
    clock = FakeClock()
    fake = FakeAdapter(clock=clock)
    await fake.apply(_plan())
    started = (await fake.observe(pr.BundleRef("app"))).workloads[0].started_at
    assert started == clock.now()
    clock.advance(30)
    fake.exit_workload(pr.WorkloadRef("app", "web"), 0)
    await fake.apply(_plan())
    again = (await fake.observe(pr.BundleRef("app"))).workloads[0].started_at
    assert again is not None
    assert started is not None
    assert (again - started).total_seconds() == 30
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


async def test_scripted_images_exit_crash_and_log() -> None:
    fake = FakeAdapter()
    fake.script_image("x/crash:1", ImageBehaviour(exit_code=2, log=b"boom\n"))
    fake.script_image("x/hog:1", ImageBehaviour(oom=True))
    fake.script_image("x/sick:1", ImageBehaviour(healthy=False))
    check = pr.HealthCheck(command=("true",))
    plan = _plan(
        pr.WorkloadPlan(name="crash", image="x/crash:1"),
        pr.WorkloadPlan(name="hog", image="x/hog:1"),
        pr.WorkloadPlan(name="sick", image="x/sick:1", health=check),
    )
    await fake.apply(plan)
    observed = await fake.observe(pr.BundleRef("app"))
    assert observed.workload("crash").exit_code == 2
    assert observed.workload("hog").oom_killed
    assert observed.workload("hog").exit_code == 137
    assert observed.workload("sick").healthy is False
    async with fake.logs(pr.WorkloadRef("app", "crash")) as stream:
        assert await pr.read_all(stream) == b"boom\n"


async def test_faults_fail_the_next_calls_then_recover() -> None:
    fake = FakeAdapter()
    fake.faults.fail_next("observe", pr.AdapterUnavailable("api down"), times=2)
    for _ in range(2):
        with pytest.raises(pr.AdapterUnavailable):
            await fake.observe(pr.BundleRef("app"))
    assert (await fake.observe(pr.BundleRef("app"))).exists is False
    assert fake.calls["observe"] == 3
    assert fake.faults.pending("observe") == 0


async def test_latency_is_injected() -> None:
    fake = FakeAdapter()
    fake.faults.add_latency("capacity", 0.05)
    with anyio.move_on_after(0.01) as scope:
        await fake.capacity()
    assert scope.cancelled_caught
    fake.faults.add_latency("capacity", 0)
    with anyio.fail_after(1):
        await fake.capacity()


async def test_capacity_placement_and_largest_fit() -> None:
    fake = FakeAdapter(
        nodes=[
            FakeNode(name="small", cpu_millis=1000, memory_bytes=1 * GIB),
            FakeNode(name="big", cpu_millis=4000, memory_bytes=8 * GIB),
        ]
    )
    heavy = pr.Resources(cpu_millis=3000, memory_bytes=6 * GIB)
    plan = _plan(pr.WorkloadPlan(name="web", image="x/web:1", resources=heavy))
    await fake.apply(plan)
    assert fake.placement(pr.WorkloadRef("app", "web")) == "big"
    capacity = await fake.capacity()
    assert capacity.total_cpu_millis == 5000
    assert capacity.running_workloads == 1
    assert capacity.largest_fit == pr.Fit(cpu_millis=1000, memory_bytes=2 * GIB)
    assert await fake.largest_fit_for("app") == pr.Fit(cpu_millis=4000, memory_bytes=8 * GIB)
    other = _plan(pr.WorkloadPlan(name="web", image="x/web:1", resources=heavy), bundle_id="two")
    writes = fake.writes
    with pytest.raises(pr.CapacityExceeded):
        await fake.apply(other)
    assert fake.writes == writes, "a refused apply writes nothing"
    assert "two" not in fake.bundle_ids()


async def test_read_scope_shares_one_expensive_read() -> None:
    fake = FakeAdapter()
    async with fake.read_scope():
        await fake.capacity()
        await fake.capacity()
        await fake.largest_fit_for("a")
        await fake.largest_fit_for("a")
    assert fake.reads == 2
    await fake.capacity()
    assert fake.reads == 3


async def test_exec_handlers_and_command_not_found() -> None:
    fake = FakeAdapter()
    await fake.apply(_plan())
    ref = pr.WorkloadRef("app", "web")

    async def env_handler(context: ExecContext) -> int:
        await context.stdout.send(context.env["WHO"].encode())
        return 0

    fake.on_exec(("whoami",), env_handler)
    result = await fake.run(ref, pr.ExecRequest(command=("whoami",), env={"WHO": "tester"}))
    assert result.stdout == b"tester"
    missing = await fake.run(ref, pr.ExecRequest(command=("frobnicate",)))
    assert missing.exit_code == 127
    assert b"command not found" in missing.stderr
    fake.exit_workload(ref, 0)
    with pytest.raises(pr.NotFound):
        await fake.run(ref, pr.ExecRequest(command=("whoami",)))


async def test_event_stream_drop_raises_adapter_unavailable() -> None:
    fake = FakeAdapter()
    async with fake.watch_bundles() as events:
        assert (await anext(events)).kind is pr.BundleEventKind.WATCHING
        fake.drop_event_streams()
        with pytest.raises(pr.AdapterUnavailable):
            await anext(events)


async def test_health_changes_are_events() -> None:
    fake = FakeAdapter()
    check = pr.HealthCheck(command=("true",))
    await fake.apply(_plan(pr.WorkloadPlan(name="web", image="x/web:1", health=check)))
    ref = pr.WorkloadRef("app", "web")
    async with fake.watch_bundles() as events:
        await anext(events)
        fake.set_health(ref, False)
        fake.set_health(ref, False)  # no change, no event
        fake.set_health(ref, True)
        kinds = [(await anext(events)).healthy for _ in range(2)]
    assert kinds == [False, True]


async def test_volume_restore_refuses_unsafe_archives_and_changes_nothing() -> None:
    fake = FakeAdapter()
    handle = await fake.create_volume(pr.VolumeRequest(volume_id="v1", bundle_id="app", name="d"))
    await fake.restore_volume(handle, pr.BytesReceiveStream(make_tar({"ok": b"1"})))
    with pytest.raises(pr.InvalidInput):
        await fake.restore_volume(handle, pr.BytesReceiveStream(make_tar({"../escape": b"x"})))
    with pytest.raises(pr.InvalidInput):
        await fake.restore_volume(handle, pr.BytesReceiveStream(b"not a tar at all"))
    assert fake.volume_files("v1") == {"ok": b"1"}
    with pytest.raises(pr.AdapterFailed):
        await fake.create_volume(pr.VolumeRequest(volume_id="v1", bundle_id="other", name="d"))


async def test_images_import_and_trial_observations() -> None:
    fake = FakeAdapter()
    reference = await fake.import_image(pr.BytesReceiveStream(b"image archive bytes"))
    assert await fake.has_image(reference)
    assert not await fake.has_image("fake.local/imported@sha256:" + "0" * 64)
    fake.script_image(
        "x/server:1",
        ImageBehaviour(listens=(pr.Port(8080),), writes=("/data/db", "/etc/passwd"), log=b"up"),
    )
    result = await fake.trial(
        pr.TrialRequest(trial_id="t1", image="x/server:1", declared_paths=("/data",))
    )
    assert result.exit_code is None
    assert result.observed_ports == (pr.Port(8080),)
    assert result.observed_writes == ("/etc/passwd",)
    with pytest.raises(pr.CapabilityUnsupported) as refused:
        await fake.trial(
            pr.TrialRequest(trial_id="t2", image="x/a:1", isolation_floor=pr.IsolationClass.VM)
        )
    assert refused.value.details["problems"][0]["path"] == "isolation_floor"


async def test_edge_failure_is_explained() -> None:
    fake = FakeAdapter()
    plan = pr.EdgePlan(
        name="edge", image="traefik:3", mounts=(pr.EdgeMount(path="/acme", volume_id="acme"),)
    )
    await fake.apply_edge(plan)
    assert [h.volume_id for h in await fake.edge_volumes()] == ["acme"]
    fake.fail_edge("edge", "image pull failed: traefik:3 not found")
    state = await fake.observe_edge("edge")
    assert not state.running
    assert "image pull failed" in state.detail


async def test_closed_adapter_is_unavailable_and_health_can_fail() -> None:
    fake = FakeAdapter()
    fake.set_runtime_health(False)
    with pytest.raises(pr.AdapterUnavailable):
        await fake.health_check()
    async with fake:
        pass
    with pytest.raises(pr.AdapterUnavailable):
        await fake.observe(pr.BundleRef("app"))


async def test_follow_logs_see_new_lines_then_end_with_the_workload() -> None:
    fake = FakeAdapter()
    await fake.apply(_plan())
    ref = pr.WorkloadRef("app", "web")
    fake.write_log(ref, b"one\n")
    received: list[bytes] = []
    async with anyio.create_task_group() as group:

        async def follow() -> None:
            async with fake.logs(ref, pr.LogOptions(follow=True)) as stream:
                async for chunk in stream:
                    received.append(chunk)

        group.start_soon(follow)
        await anyio.wait_all_tasks_blocked()
        fake.write_log(ref, b"two\n")
        await anyio.wait_all_tasks_blocked()
        fake.exit_workload(ref, 0)
    assert received == [b"one\n", b"two\n"]


async def test_usage_reports_what_the_test_set() -> None:
    fake = FakeAdapter()
    await fake.apply(_plan())
    fake.set_usage(pr.WorkloadRef("app", "web"), cpu_millis=250, memory_bytes=1000)
    usage = await fake.usage(pr.BundleRef("app"))
    assert usage.workloads[0].cpu_millis == 250
    assert (await fake.in_use()).memory_bytes == 1000


async def test_state_file_shares_the_world_between_processes(tmp_path: Path) -> None:
    state = str(tmp_path / "fake.json")
    plan = _plan(pr.WorkloadPlan(name="web", image="x/web:1", mounts=(pr.Mount("v", "/d"),)))
    plan = pr.BundlePlan(
        bundle_id="app",
        workloads=plan.workloads,
        volumes=(pr.VolumePlan(volume_id="v", name="data"),),
    )
    async with FakeAdapter({"state_file": state}) as first:
        await first.apply(plan)
        first.write_log(pr.WorkloadRef("app", "web"), b"hello\n")
        first.write_volume_file("v", "note.txt", b"kept")
        before = await first.observe(pr.BundleRef("app"))
    async with FakeAdapter({"state_file": state}) as second:
        assert await second.observe(pr.BundleRef("app")) == before
        async with second.logs(pr.WorkloadRef("app", "web")) as log:
            assert await pr.read_all(log) == b"hello\n"
        assert second.volume_files("v") == {"note.txt": b"kept"}
        writes = second.writes
        await second.apply(plan)
        assert second.writes == writes, "the re-loaded world is the same world"


async def test_a_state_file_of_version_1_keeps_its_base64_carried_files(tmp_path: Path) -> None:
    state = tmp_path / "fake.json"
    files = (pr.CarriedFile("/etc/a.conf", b"a = 1\n"), pr.CarriedFile("/bin/x", b"\x00\xff"))
    plan = _plan(pr.WorkloadPlan(name="web", image="x/web:1", files=files))
    async with FakeAdapter({"state_file": str(state)}) as first:
        await first.apply(plan)
    data = json.loads(state.read_text())
    assert data["version"] == 2
    for carried in data["bundles"][0]["plan"]["workloads"][0]["files"]:  # as version 1 wrote it
        raw = carried.pop("content_base64", None)
        if raw is None:
            raw = base64.b64encode(carried.pop("content").encode()).decode()
        carried["content"] = raw
    data["version"] = 1
    state.write_text(json.dumps(data))
    async with FakeAdapter({"state_file": str(state)}) as second:
        assert second.plan_of("app") == plan


async def test_only_exposed_ports_admit_the_outside_and_exposure_replaces_nothing() -> None:
    fake = FakeAdapter()
    web = pr.WorkloadPlan(
        name="web",
        image="example/web:1",
        ports=(pr.Port(8080), pr.Port(5353, pr.PortProtocol.UDP)),
        exposed=True,
    )
    db = pr.WorkloadPlan(name="db", image="example/db:1", ports=(pr.Port(5432),))
    plan = pr.BundlePlan(bundle_id="app", workloads=(web, db))
    await fake.apply(plan)
    web_ref, db_ref = pr.WorkloadRef("app", "web"), pr.WorkloadRef("app", "db")
    assert fake.ingress_allowed(web_ref, 8080)
    assert fake.ingress_allowed(web_ref, 5353, "udp")
    assert not fake.ingress_allowed(web_ref, 5353), "the protocol counts"
    assert not fake.ingress_allowed(web_ref, 9090), "only the plan's ports"
    assert not fake.ingress_allowed(db_ref, 5432), "not exposed: only its own app reaches it"
    hidden = attrs.evolve(plan, workloads=(attrs.evolve(web, exposed=False), db))
    await fake.apply(hidden)
    assert not fake.ingress_allowed(web_ref, 8080)
    assert fake.instances_started(web_ref) == 1, "who may connect is not what runs"
    with pytest.raises(pr.NotFound):
        fake.ingress_allowed(pr.WorkloadRef("app", "cache"), 6379)


async def test_egress_rules_are_data_the_fake_answers_from() -> None:
    fake = FakeAdapter()
    rules = pr.EgressPolicy(
        allow=(
            pr.EgressRule(destination="203.0.113.0/24", ports=(443,)),
            pr.EgressRule(destination="api.example.com", ports=(443,)),
        )
    )
    plan = pr.BundlePlan(
        bundle_id="app",
        workloads=(pr.WorkloadPlan(name="web", image="example/web:1"),),
        network=pr.NetworkPlan(egress=rules),
    )
    await fake.apply(plan)
    ref = pr.BundleRef("app")
    assert fake.egress_allowed(ref, "203.0.113.5", 443)
    assert fake.egress_allowed(ref, "api.example.com", 443)
    assert not fake.egress_allowed(ref, "api.example.com", 80)
    assert not fake.egress_allowed(ref, "example.org", 443)
    await fake.apply(attrs.evolve(plan, network=pr.NetworkPlan()))
    assert fake.egress_allowed(ref, "example.org", 443), "no rules: unrestricted"
    trial = pr.TrialRequest(trial_id="t1", image="example/web:1", egress=rules)
    assert (await fake.trial(trial)).started
    assert fake.trial_egress["t1"] == rules
    cidr_only = FakeAdapter(capabilities=pr.RuntimeCapabilities(egress_restriction=True))
    with pytest.raises(pr.CapabilityUnsupported):
        await cidr_only.apply(plan)
    assert cidr_only.bundle_ids() == []


async def test_a_graceful_stop_is_observed_stopping_and_holds_back_an_apply(
    tmp_path: Path,
) -> None:
    state = str(tmp_path / "fake.json")
    plan = _plan(pr.WorkloadPlan(name="web", image="x/slow:1"))
    ref = pr.BundleRef("app")
    async with FakeAdapter({"state_file": state}) as fake:
        fake.script_image("x/slow:1", ImageBehaviour(stop_grace=5))
        await fake.apply(plan)
        old = (await fake.observe(ref)).workload("web").instance_id
        await fake.destroy(ref)
        leaving = await fake.observe(ref)
        assert leaving.exists
        assert leaving.stopping
        assert not leaving.all_running
        web = leaving.workload("web")
        assert (web.running, web.stopping, web.instance_id) == (True, True, old)
        with pytest.raises(pr.StillStopping) as refused:
            await fake.apply(plan)
        assert refused.value.details == {"bundle_id": "app", "workloads": ["web"]}
        assert refused.value.code == "STILL_STOPPING"
    async with FakeAdapter({"state_file": state}) as again:  # kept in the state file
        again.script_image("x/slow:1", ImageBehaviour(stop_grace=5))  # scripts are not kept
        assert await again.observe(ref) == leaving
        again.clock.advance(5)
        assert not (await again.observe(ref)).exists
        await again.apply(plan)
        started = (await again.observe(ref)).workload("web")
        assert started.instance_id != old
        assert not started.stopping
        await again.stop(ref)
        assert (await again.observe(ref)).workload("web").stopping
        again.clock.advance(5)
        assert not (await again.observe(ref)).workload("web").present


async def test_a_lost_node_keeps_what_it_runs_until_it_is_back() -> None:
    fake = FakeAdapter()
    ref = pr.WorkloadRef("app", "web")
    await fake.apply(_plan())
    first = fake.placement(ref)
    assert first is not None
    fake.lose_node(first)
    observed = (await fake.observe(pr.BundleRef("app"))).workload("web")
    assert (observed.lost, observed.running, observed.present) == (True, False, True)
    assert fake.instances_running(ref) == 1
    await fake.apply(_plan())  # replaced on the other node; the old one runs on, unseen
    assert fake.placement(ref) not in (None, first)
    assert fake.instances_running(ref) == 2
    await fake.destroy(pr.BundleRef("app"))
    assert not (await fake.observe(pr.BundleRef("app"))).exists
    assert fake.instances_running(ref) == 1  # the lost node still runs the first
    fake.recover_node(first)
    assert fake.instances_running(ref) == 0
    with pytest.raises(pr.NotFound):
        fake.lose_node("no-such-node")


async def test_nothing_is_placed_on_a_lost_node() -> None:
    fake = FakeAdapter(nodes=[FakeNode(name="only", cpu_millis=1000, memory_bytes=GIB)])
    fake.lose_node("only")
    with pytest.raises(pr.CapacityExceeded):
        await fake.apply(_plan())
