"""Conformance: applying, observing, stopping and destroying bundles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import attrs
import pytest

from ..._contract._capabilities import Capability, IsolationClass
from ..._contract._errors import (
    AdapterUnavailable,
    CapabilityUnsupported,
    InvalidInput,
    InvalidPlan,
)
from ..._contract._events import BundleEventKind
from ..._contract._observed import ObservedBundle, WorkloadProblem
from ..._contract._plans import (
    BundlePlan,
    CarriedFile,
    EgressPolicy,
    HealthCheck,
    Mount,
    NetworkPlan,
    Port,
    Resources,
    VolumePlan,
    WorkloadPlan,
)
from ..._contract._refs import BundleRef, DestroyOptions, WorkloadRef
from ..._input._convert import from_json, to_json
from ._base import ConformanceBase, Kit, requires, since

__all__ = ["BundleConformance", "ValidationConformance"]

AT_ONCE = 2.0
"""Seconds within which an adapter answers from state it holds, confirmed or not."""


async def _confirmed(kit: Kit, plan: BundlePlan) -> ObservedBundle | None:
    try:
        return await kit.observe(plan)
    except AdapterUnavailable:
        return None


def _instances(observed: ObservedBundle) -> dict[str, str | None]:
    return {w.name: w.instance_id for w in observed.workloads}


class BundleConformance(ConformanceBase):
    """The bundle lifecycle every adapter must honour."""

    @since("1.0")
    @requires(Capability.MULTIPLE_WORKLOADS)
    async def test_apply_then_observe_runs_every_workload(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web", ports=(Port(8080),)), kit.workload("worker"))
        handle = await kit.apply(plan)
        assert handle.bundle_id == plan.bundle_id
        observed = await kit.running(plan)
        assert observed.exists
        assert {w.name for w in observed.workloads} == {"web", "worker"}
        for workload in observed.workloads:
            assert workload.present
            assert workload.exit_code is None
            assert workload.started_at is not None
            assert workload.instance_id

    @since("1.0")
    async def test_observe_unknown_bundle_reports_absent(self, kit: Kit) -> None:
        observed = await kit.observe(kit.new_id("absent"))
        assert observed.exists is False
        assert observed.workloads == ()

    @since("1.0")
    async def test_observe_says_when_it_was_confirmed(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web"))
        await kit.applied_and_running(plan)
        first = (await kit.observe(plan)).confirmed_at
        second = (await kit.observe(plan)).confirmed_at
        if first is None:  # the contract lets an adapter not say; then it never says
            assert second is None
            return
        assert first.tzinfo is not None
        assert second is not None
        assert second >= first  # confirmation never goes back in time

    @since("1.0")
    async def test_observe_refuses_state_unconfirmed_past_its_bound(self, kit: Kit) -> None:
        kit.needs("cache_goes_stale", "cache_recovers")
        plan = kit.plan(kit.workload("web"))
        await kit.applied_and_running(plan)
        await kit.harness.cache_goes_stale(kit.adapter)
        try:
            with pytest.raises(AdapterUnavailable):
                await kit.observe(plan)
        finally:
            await kit.harness.cache_recovers(kit.adapter)
        observed = await kit.eventually(lambda: _confirmed(kit, plan), "observe to answer again")
        assert observed.exists

    @since("1.1")
    @requires(Capability.CONFIRMED_OBSERVE)
    async def test_observe_not_before_answers_state_confirmed_since(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web"))
        await kit.applied_and_running(plan)
        first = (await kit.observe(plan)).confirmed_at
        if first is None:  # the adapter does not say: nothing to compare
            return
        ref = BundleRef(plan.bundle_id)
        again = await kit.adapter.observe(ref, not_before=first)
        assert again.exists
        assert again.confirmed_at is not None
        assert again.confirmed_at >= first

    @since("1.1")
    @requires(Capability.CONFIRMED_OBSERVE)
    async def test_observe_answers_unconfirmed_state_at_once_and_waits_when_asked(
        self, kit: Kit
    ) -> None:
        kit.needs("cache_unconfirmed", "cache_recovers")
        plan = kit.plan(kit.workload("web"))
        await kit.applied_and_running(plan)
        ref = BundleRef(plan.bundle_id)
        await kit.harness.cache_unconfirmed(kit.adapter)
        try:
            with anyio.fail_after(AT_ONCE):  # no waiting for a confirmation
                stale = await kit.observe(plan)
                later = await kit.observe(plan)
            assert stale.exists
            assert stale.confirmed_at is not None
            # Nothing confirmed it in between: the adapter does not claim it did.
            assert later.confirmed_at == stale.confirmed_at
            wanted = stale.confirmed_at + timedelta(milliseconds=1)
            answers: list[ObservedBundle] = []

            async def ask() -> None:
                answers.append(await kit.adapter.observe(ref, not_before=wanted))

            async with anyio.create_task_group() as group:
                group.start_soon(ask)
                await anyio.sleep(0.3)
                assert not answers, "observe(not_before=...) answered unconfirmed state"
                await kit.harness.cache_recovers(kit.adapter)
        finally:
            await kit.harness.cache_recovers(kit.adapter)
        (fresh,) = answers
        assert fresh.exists
        assert fresh.confirmed_at is not None
        assert fresh.confirmed_at >= wanted

    @since("1.0")
    async def test_second_apply_changes_nothing_observable(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web", env={"GREETING": "hello"}))
        before = await kit.applied_and_running(plan)
        await kit.adapter.apply(plan)
        await kit.quiet()
        after = await kit.observe(plan)
        assert after == before

    @since("1.0")
    @requires(Capability.MULTIPLE_WORKLOADS)
    async def test_changed_workload_is_replaced_unchanged_one_kept(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web", env={"VERSION": "1"}), kit.workload("worker"))
        before = _instances(await kit.applied_and_running(plan))
        changed = BundlePlan(
            bundle_id=plan.bundle_id,
            workloads=(kit.workload("web", env={"VERSION": "2"}), kit.workload("worker")),
            labels=plan.labels,
            isolation=plan.isolation,
        )
        await kit.apply(changed)
        after = await kit.until_observed(
            changed,
            lambda o: o.all_running and _instances(o)["web"] != before["web"],
            "the changed workload to be replaced",
        )
        assert _instances(after)["worker"] == before["worker"]

    @since("1.0")
    async def test_observe_never_remediates_an_ended_workload(self, kit: Kit) -> None:
        kit.needs("end_workload")
        plan = kit.plan()
        observed = await kit.applied_and_running(plan)
        first = observed.workloads[0].instance_id
        await kit.harness_call(kit.harness.end_workload(kit.adapter, kit.ref(plan), 3))
        ended = await kit.until_observed(
            plan, lambda o: o.workloads[0].exit_code is not None, "the workload to end"
        )
        assert ended.workloads[0].exit_code == 3
        assert not ended.workloads[0].running
        await kit.quiet()
        later = await kit.observe(plan)
        assert later.workloads[0].running is False
        assert later.workloads[0].instance_id == first
        assert later.workloads[0].restart_count == 0

    @since("1.0")
    async def test_an_image_that_cannot_be_pulled_is_observed_as_such(self, kit: Kit) -> None:
        kit.needs("unpullable_image")
        image = await kit.harness.unpullable_image(kit.adapter)
        plan = kit.plan(WorkloadPlan(name="app", image=image, command=kit.harness.command))
        await kit.apply(plan)
        stuck = await kit.until_observed(
            plan,
            lambda o: o.workloads[0].problem is not None,
            "the workload to be reported stuck",
        )
        workload = stuck.workloads[0]
        assert workload.problem is WorkloadProblem.IMAGE_PULL
        assert workload.present
        assert not workload.running
        assert workload.exit_code is None
        assert workload.problem_detail  # the runtime's words, for a person
        await kit.quiet()
        assert (await kit.observe(plan)).workloads[0].problem is WorkloadProblem.IMAGE_PULL

    @since("1.0")
    async def test_apply_replaces_an_ended_workload(self, kit: Kit) -> None:
        kit.needs("end_workload")
        plan = kit.plan()
        first = (await kit.applied_and_running(plan)).workloads[0].instance_id
        await kit.harness_call(kit.harness.end_workload(kit.adapter, kit.ref(plan), 1))
        await kit.until_observed(
            plan, lambda o: o.workloads[0].exit_code is not None, "the workload to end"
        )
        await kit.apply(plan)
        again = await kit.running(plan)
        assert again.workloads[0].instance_id != first
        assert again.workloads[0].exit_code is None

    @since("1.0")
    @requires(Capability.MULTIPLE_WORKLOADS)
    async def test_stop_then_apply_starts_again(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web"), kit.workload("worker"))
        await kit.applied_and_running(plan)
        await kit.adapter.stop(BundleRef(plan.bundle_id))
        stopped = await kit.until_observed(
            plan, lambda o: not any(w.running for w in o.workloads), "every workload to stop"
        )
        assert stopped.exists, "stop keeps the bundle"
        await kit.apply(plan)
        await kit.running(plan)

    @since("1.0")
    @requires(Capability.PERSISTENT_VOLUMES)
    async def test_stop_keeps_volumes(self, kit: Kit) -> None:
        volume = VolumePlan(volume_id=kit.new_id("vol"), name="data")
        plan = kit.plan(
            kit.workload("web", mounts=(Mount(volume.volume_id, "/data"),)), volumes=(volume,)
        )
        await kit.applied_and_running(plan)
        await kit.adapter.stop(BundleRef(plan.bundle_id))
        observed = await kit.observe(plan)
        assert observed.volume(volume.volume_id).present

    @since("1.0")
    async def test_destroy_removes_the_bundle(self, kit: Kit) -> None:
        plan = kit.plan()
        await kit.applied_and_running(plan)
        await kit.adapter.destroy(BundleRef(plan.bundle_id))
        await kit.until_observed(plan, lambda o: not o.exists, "the bundle to be gone")
        await kit.adapter.destroy(BundleRef(plan.bundle_id))  # idempotent

    @since("1.0")
    @requires(Capability.PERSISTENT_VOLUMES)
    async def test_destroy_keeps_volumes_by_default_and_removes_them_on_request(
        self, kit: Kit
    ) -> None:
        volume = VolumePlan(volume_id=kit.new_id("vol"), name="data")
        plan = kit.plan(
            kit.workload("web", mounts=(Mount(volume.volume_id, "/data"),)), volumes=(volume,)
        )
        await kit.applied_and_running(plan)
        await kit.adapter.destroy(BundleRef(plan.bundle_id))
        kept = await kit.until_observed(
            plan, lambda o: not any(w.present for w in o.workloads), "the workloads to be gone"
        )
        assert kept.volume(volume.volume_id).present, "destroy keeps volumes by default"
        await kit.adapter.destroy(BundleRef(plan.bundle_id), DestroyOptions(keep_volumes=False))
        gone = await kit.until_observed(
            plan,
            lambda o: all(v.volume_id != volume.volume_id or not v.present for v in o.volumes),
            "the volume to be destroyed",
        )
        assert not gone.exists

    @since("1.0")
    @requires(Capability.MULTIPLE_WORKLOADS)
    async def test_dependencies_start_first(self, kit: Kit) -> None:
        db = kit.workload("db", ports=(Port(5432),), health=HealthCheck(command=("true",)))
        api = kit.workload("api", depends_on=("db",))
        plan = kit.plan(api, db)
        if kit.caps.supports(Capability.BUNDLE_EVENTS):
            async with kit.adapter.watch_bundles() as events:
                first = await anext(events)
                assert first.kind is BundleEventKind.WATCHING
                await kit.apply(plan)
                order: list[str] = []
                with anyio.fail_after(kit.harness.timeout):
                    async for event in events:
                        if (
                            event.bundle_id == plan.bundle_id
                            and event.workload
                            and event.kind is BundleEventKind.STARTED
                        ):
                            order.append(event.workload)
                        if len(order) == 2:
                            break
            assert order == ["db", "api"]
        else:
            await kit.apply(plan)
        observed = await kit.running(plan)
        db_start = observed.workload("db").started_at
        api_start = observed.workload("api").started_at
        assert db_start is not None
        assert api_start is not None
        assert db_start <= api_start

    @since("1.0")
    @requires(Capability.MULTIPLE_WORKLOADS)
    async def test_health_is_tri_state(self, kit: Kit) -> None:
        plan = kit.plan(
            kit.workload("plain"), kit.workload("checked", health=HealthCheck(command=("true",)))
        )
        await kit.apply(plan)
        observed = await kit.until_observed(
            plan,
            lambda o: o.all_running and o.workload("checked").healthy is True,
            "the workload whose check passes to be healthy",
        )
        assert observed.workload("plain").healthy is None, "no check means no signal"

    @since("1.0")
    async def test_upstream_is_computed(self, kit: Kit) -> None:
        upstream = kit.adapter.upstream(WorkloadRef(kit.new_id(), "web"), 8080)
        assert upstream.url.split("://", 1)[0] in ("http", "https")
        assert upstream.url.endswith(":8080")
        assert upstream.pool_key

    @since("1.0")
    async def test_observed_state_round_trips_through_json(self, kit: Kit) -> None:
        plan = kit.plan()
        observed = await kit.applied_and_running(plan)
        assert from_json(to_json(observed), ObservedBundle) == observed

    @since("1.0")
    async def test_health_check_passes(self, kit: Kit) -> None:
        await kit.adapter.health_check()


class ValidationConformance(ConformanceBase):
    """Bad input is refused, every problem listed, and nothing is written."""

    @since("1.0")
    async def test_invalid_plan_lists_every_problem_and_writes_nothing(self, kit: Kit) -> None:
        bundle_id = kit.new_id()
        plan = BundlePlan(
            bundle_id=bundle_id,
            workloads=(
                kit.workload("good"),
                WorkloadPlan(
                    name="Bad_Name",
                    image="not a valid image!",
                    ports=(Port(0),),
                    depends_on=("missing",),
                ),
            ),
        )
        kit.track(bundle_id)
        with pytest.raises(InvalidPlan) as caught:
            await kit.adapter.apply(plan)
        paths = {p.path for p in caught.value.problems}
        assert {
            "workloads[1].name",
            "workloads[1].image",
            "workloads[1].ports[0].number",
            "workloads[1].depends_on[0]",
        } <= paths
        assert caught.value.code == "INVALID_PLAN"
        assert caught.value.remedy
        observed = await kit.observe(bundle_id)
        assert not observed.exists
        assert not any(w.present for w in observed.workloads)

    @since("1.1")
    async def test_check_plan_refuses_what_apply_refuses_and_writes_nothing(self, kit: Kit) -> None:
        bad = kit.plan(kit.workload("web"), kit.workload("web", image="not a valid image!"))
        kit.track(bad.bundle_id)
        with pytest.raises(InvalidPlan) as checked:
            await kit.adapter.check_plan(bad)
        with pytest.raises(InvalidPlan) as applied:
            await kit.adapter.apply(bad)
        assert {p.path for p in checked.value.problems} == {p.path for p in applied.value.problems}
        assert {"workloads[1].name", "workloads[1].image"} <= {
            p.path for p in checked.value.problems
        }
        good = kit.plan(kit.workload("web"))
        kit.track(good.bundle_id)
        await kit.adapter.check_plan(good)  # a good plan: no error
        assert not (await kit.observe(good)).exists, "check_plan writes nothing"

    @since("1.2")
    async def test_observe_refuses_a_not_before_that_is_no_aware_datetime(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("web"))
        await kit.applied_and_running(plan)
        ref = BundleRef(plan.bundle_id)
        naive = datetime.now(UTC).replace(tzinfo=None)
        for bad in (naive, naive.isoformat(), naive.timestamp()):
            with pytest.raises(InvalidInput) as caught:
                await kit.adapter.observe(ref, not_before=bad)  # type: ignore[arg-type]
            assert caught.value.code == "INVALID_INPUT", bad
            assert [p.path for p in caught.value.problems] == ["not_before"], bad
            assert "timezone-aware datetime" in caught.value.problems[0].message
            assert "timezone-aware datetime" in caught.value.remedy
        # An aware instant is still taken, in any timezone.
        again = await kit.adapter.observe(ref, not_before=datetime.now(UTC).astimezone())
        assert again.exists

    @since("1.0")
    async def test_dependency_cycle_is_refused(self, kit: Kit) -> None:
        plan = kit.plan(kit.workload("a", depends_on=("b",)), kit.workload("b", depends_on=("a",)))
        kit.track(plan.bundle_id)
        with pytest.raises(InvalidPlan) as caught:
            await kit.adapter.apply(plan)
        assert any(p.code == "cycle" for p in caught.value.problems)
        assert not (await kit.observe(plan)).exists

    @since("1.5")
    async def test_plan_needing_stronger_isolation_is_refused(self, kit: Kit) -> None:
        stronger = [c for c in IsolationClass if c > kit.caps.isolation_class]
        if not stronger:
            pytest.skip("no isolation class is stronger than this runtime's")
        plan = attrs.evolve(kit.plan(), isolation=stronger[0])
        kit.track(plan.bundle_id)
        for check in (kit.adapter.check_plan, kit.adapter.apply):
            with pytest.raises(CapabilityUnsupported) as caught:
                await check(plan)
            assert caught.value.capability == Capability.ISOLATION_CLASS.value
            assert [p["path"] for p in caught.value.details["problems"]] == ["isolation"]
        assert not (await kit.observe(plan)).exists

    @since("1.0")
    async def test_plan_beyond_capabilities_is_refused(self, kit: Kit) -> None:
        lacking = [
            c
            for c in (
                Capability.PERSISTENT_VOLUMES,
                Capability.CARRIED_FILES,
                Capability.MULTIPLE_WORKLOADS,
                Capability.RESOURCE_LIMITS,
                Capability.EGRESS_RESTRICTION,
            )
            if not kit.caps.supports(c)
        ]
        if not lacking:
            pytest.skip("the adapter supports every plan feature this test can ask beyond")
        volume = VolumePlan(volume_id=kit.new_id("vol"), name="data")
        plan = BundlePlan(
            bundle_id=kit.new_id(),
            workloads=(
                kit.workload(
                    "a",
                    mounts=(Mount(volume.volume_id, "/data"),),
                    files=(CarriedFile("/etc/app.conf", b"x"),),
                    resources=Resources(cpu_millis=100),
                ),
                kit.workload("b"),
            ),
            volumes=(volume,),
            network=NetworkPlan(egress=EgressPolicy()),
        )
        kit.track(plan.bundle_id)
        with pytest.raises(CapabilityUnsupported) as caught:
            await kit.adapter.apply(plan)
        named = {p["capability"] for p in caught.value.details["problems"]}
        assert named == {c.value for c in lacking}
        assert not (await kit.observe(plan)).exists
