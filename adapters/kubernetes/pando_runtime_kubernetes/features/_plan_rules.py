"""Every rule a plan, or a trial, meets on this adapter, checked in one place and one pass.

The contract's own rules (against the adapter's capabilities), then what only this adapter
knows: egress rules it can never honour, a workload taking the egress gateway's name, and
workloads giving one registry two different credentials (a pull secret holds one per
registry). Every problem is listed at once, each with its path; nothing is written.
"""

from __future__ import annotations

from pando_runtime import BundlePlan, Problem, RuntimeCapabilities, TrialRequest, validate_plan
from pando_runtime.plugin import raise_problems, validate_trial

from ..manifests._namespace_objects import pull_auth_conflicts
from ..manifests._network import AppNetwork

__all__ = ["PlanRules"]


class PlanRules:
    """The plan and trial checks of one adapter (its network settings decide some)."""

    def __init__(self, network: AppNetwork) -> None:
        self._network = network

    def bundle_problems(self, plan: BundlePlan, capabilities: RuntimeCapabilities) -> list[Problem]:
        """Every problem of ``plan`` here (empty: ``apply`` would take it)."""
        return [
            *validate_plan(plan, capabilities),
            *self._network.problems(plan.network.egress, "network.egress", plan.workloads),
            *pull_auth_conflicts(plan.workloads),
        ]

    def check_bundle(self, plan: BundlePlan, capabilities: RuntimeCapabilities) -> None:
        """Raise ``InvalidPlan`` (or ``CapabilityUnsupported``) listing every problem."""
        raise_problems(
            self.bundle_problems(plan, capabilities), f"plan for bundle {plan.bundle_id!r}"
        )

    def check_trial(self, request: TrialRequest, capabilities: RuntimeCapabilities) -> None:
        """Raise ``InvalidPlan`` (or ``CapabilityUnsupported``) listing every problem."""
        raise_problems(
            [
                *validate_trial(request, capabilities),
                *self._network.problems(request.egress, "egress"),
            ],
            f"trial {request.trial_id!r}",
        )
