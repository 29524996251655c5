"""The Kubernetes adapter's plan rules: the contract's and its own, every problem in one error."""

from __future__ import annotations

import pytest
from pando_runtime_kubernetes import KubernetesConfig
from pando_runtime_kubernetes.features._plan_rules import PlanRules
from pando_runtime_kubernetes.manifests._gateway import GATEWAY
from pando_runtime_kubernetes.manifests._network import AppNetwork

from pando_runtime import (
    BundlePlan,
    CapabilityUnsupported,
    EgressPolicy,
    EgressRule,
    InvalidPlan,
    NetworkPlan,
    RegistryAuth,
    RuntimeCapabilities,
    TrialRequest,
    WorkloadPlan,
)

EVERYTHING = RuntimeCapabilities(
    private_network=True, egress_restriction=True, egress_host_names=True, trial_run=True
)


def _rules() -> PlanRules:
    network = AppNetwork(KubernetesConfig(egress_gateway_image="registry.example/sq:5"))
    return PlanRules(network, lambda: "The canary found egress rules unenforced.")


def test_a_plan_breaking_every_kind_of_rule_is_refused_once_listing_each_problem() -> None:
    one = RegistryAuth(registry="registry.example", username="a", password="pw-one-secret")  # noqa: S106
    other = RegistryAuth(registry="registry.example", username="b", password="pw-two-secret")  # noqa: S106
    plan = BundlePlan(
        bundle_id="app-1",
        workloads=(
            WorkloadPlan(name="web", image="registry.example/web:1", pull_auth=one),
            WorkloadPlan(name=GATEWAY, image="registry.example/gw:1", pull_auth=other),
            WorkloadPlan(name="web", image="registry.example/web:2"),  # the contract's rule
        ),
        network=NetworkPlan(
            egress=EgressPolicy(
                allow=(
                    EgressRule(destination="api.example.com"),  # a host: the gateway is needed
                    EgressRule(destination="169.254.169.254/32"),
                )
            )
        ),
    )
    with pytest.raises(InvalidPlan) as caught:
        _rules().check_bundle(plan, EVERYTHING)
    paths = {p.path: p.code for p in caught.value.problems}
    assert paths["network.egress.allow[1].destination"] == "forbidden_destination"
    assert paths["workloads[1].name"] == "reserved"
    assert paths["workloads[1].pull_auth"] == "conflict"
    assert any(p.startswith("workloads[2]") for p in paths), paths  # the duplicate name
    said = f"{caught.value} {caught.value.details}"
    assert "pw-one-secret" not in said
    assert "pw-two-secret" not in said


def test_a_good_plan_has_no_problem_and_a_trial_is_checked_the_same_way() -> None:
    plan = BundlePlan(bundle_id="app-1", workloads=(WorkloadPlan(name="web", image="i:1"),))
    assert _rules().bundle_problems(plan, EVERYTHING) == []
    trial = TrialRequest(
        trial_id="t-1",
        image="i:1",
        egress=EgressPolicy(allow=(EgressRule(destination="169.254.169.254/32"),)),
    )
    with pytest.raises(InvalidPlan) as caught:
        _rules().check_trial(trial, EVERYTHING)
    assert [p.path for p in caught.value.problems] == ["egress.allow[0].destination"]


def test_restricted_egress_refused_carries_the_canarys_remedy() -> None:
    plan = BundlePlan(
        bundle_id="shop",
        workloads=(WorkloadPlan(name="web", image="registry.example/web:1"),),
        network=NetworkPlan(egress=EgressPolicy(allow=(EgressRule(destination="203.0.113.0/24"),))),
    )
    with pytest.raises(CapabilityUnsupported) as refused:
        _rules().check_bundle(plan, RuntimeCapabilities(trial_run=True))
    assert refused.value.capability == "egress_restriction"
    assert refused.value.remedy == "The canary found egress rules unenforced."
    named = BundlePlan(
        bundle_id="shop",
        workloads=plan.workloads,
        network=NetworkPlan(egress=EgressPolicy(allow=(EgressRule(destination="api.example"),))),
    )
    with pytest.raises(CapabilityUnsupported) as gateway:
        _rules().check_bundle(named, RuntimeCapabilities(egress_restriction=True))
    assert "'egress_gateway_image'" in gateway.value.remedy
