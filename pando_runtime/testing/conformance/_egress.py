"""Conformance: restricted egress (``network.egress``) is applied, changed and refused by rule."""

from __future__ import annotations

import pytest

from ..._contract._capabilities import Capability
from ..._contract._errors import CapabilityUnsupported, InvalidPlan
from ..._contract._plans import BundlePlan, EgressPolicy, EgressRule, NetworkPlan
from ..._contract._refs import BundleRef
from ..._contract._trial import TrialRequest
from ._base import ConformanceBase, Kit, requires, since

__all__ = ["EgressConformance", "EgressRefusalConformance"]

CIDR_RULE = EgressRule(destination="203.0.113.0/24", ports=(443,))
HOST_RULE = EgressRule(destination="api.example.com", ports=(443,))


def _restricted(kit: Kit, bundle_id: str, *rules: EgressRule) -> BundlePlan:
    return BundlePlan(
        bundle_id=bundle_id,
        workloads=(kit.workload("web"),),
        network=NetworkPlan(egress=EgressPolicy(allow=rules)),
        isolation=kit.harness.plan_isolation,
    )


class EgressConformance(ConformanceBase):
    """Plans that restrict egress run where it is enforced; host names need their capability."""

    gate = (Capability.EGRESS_RESTRICTION,)

    @since("1.0")
    async def test_egress_cidr_rules_run_and_change(self, kit: Kit) -> None:
        bundle_id = kit.new_id()
        plan = _restricted(kit, bundle_id, CIDR_RULE)
        await kit.applied_and_running(plan)
        await kit.adapter.apply(plan)  # unchanged rules: still running, nothing to redo
        assert (await kit.observe(plan)).workload("web").running
        changed = _restricted(kit, bundle_id, EgressRule(destination="198.51.100.7/32"))
        await kit.applied_and_running(changed)
        denied = _restricted(kit, bundle_id)  # an empty allow-list: nothing outside
        await kit.applied_and_running(denied)
        opened = BundlePlan(bundle_id=bundle_id, workloads=plan.workloads, isolation=plan.isolation)
        await kit.applied_and_running(opened)

    @since("1.0")
    async def test_egress_host_name_rules_run_or_are_refused_by_path(self, kit: Kit) -> None:
        plan = _restricted(kit, kit.new_id(), CIDR_RULE, HOST_RULE)
        if kit.caps.supports(Capability.EGRESS_HOST_NAMES):
            await kit.applied_and_running(plan)
            # Dropping the host-name rule (and with it any gateway) keeps the app running.
            await kit.applied_and_running(_restricted(kit, plan.bundle_id, CIDR_RULE))
            return
        kit.track(plan.bundle_id)
        with pytest.raises(CapabilityUnsupported) as caught:
            await kit.adapter.apply(plan)
        problems = caught.value.details["problems"]
        assert [(p["path"], p["capability"]) for p in problems] == [
            ("network.egress.allow[1].destination", Capability.EGRESS_HOST_NAMES.value)
        ]
        assert not (await kit.observe(plan)).exists, "nothing is written for a refused plan"
        # The same app with its CIDR rule alone runs.
        await kit.applied_and_running(_restricted(kit, plan.bundle_id, CIDR_RULE))

    @since("1.0")
    @requires(Capability.TRIAL_RUN)
    async def test_egress_trial_is_held_to_the_app_rules(self, kit: Kit) -> None:
        rules = EgressPolicy(allow=(CIDR_RULE, HOST_RULE))
        request = TrialRequest(
            trial_id=kit.new_id("trial"),
            image=kit.harness.image,
            command=kit.harness.command,
            timeout_seconds=3,
            egress=rules,
        )
        if kit.caps.supports(Capability.EGRESS_HOST_NAMES):
            assert (await kit.adapter.trial(request)).started
            return
        with pytest.raises(CapabilityUnsupported) as caught:
            await kit.adapter.trial(request)
        paths = [p["path"] for p in caught.value.details["problems"]]
        assert paths == ["egress.allow[1].destination"]


class EgressRefusalConformance(ConformanceBase):
    """Bad egress rules are invalid everywhere; rules a runtime cannot enforce are refused."""

    @since("1.0")
    async def test_egress_rules_must_be_cidr_blocks_or_host_names(self, kit: Kit) -> None:
        plan = _restricted(
            kit,
            kit.new_id(),
            EgressRule(destination="10.0.0.1/8"),
            EgressRule(destination="not a host"),
            EgressRule(destination="api.example.com", ports=(0,)),
        )
        kit.track(plan.bundle_id)
        with pytest.raises(InvalidPlan) as caught:
            await kit.adapter.apply(plan)
        assert {p.path for p in caught.value.problems if p.capability is None} == {
            "network.egress.allow[0].destination",
            "network.egress.allow[1].destination",
            "network.egress.allow[2].ports[0]",
        }
        assert not (await kit.observe(plan)).exists

    @since("1.0")
    async def test_restricted_egress_is_refused_where_it_is_not_enforced(self, kit: Kit) -> None:
        if kit.caps.supports(Capability.EGRESS_RESTRICTION):
            pytest.skip("the adapter enforces egress rules")
        plan = _restricted(kit, kit.new_id(), CIDR_RULE)
        kit.track(plan.bundle_id)
        with pytest.raises(CapabilityUnsupported) as caught:
            await kit.adapter.apply(plan)
        assert caught.value.capability == Capability.EGRESS_RESTRICTION.value
        assert not (await kit.adapter.observe(BundleRef(plan.bundle_id))).exists
