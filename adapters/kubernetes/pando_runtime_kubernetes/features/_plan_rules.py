"""Every rule a plan, or a trial, meets on this adapter, checked in one place and one pass.

The contract's own rules (against the adapter's capabilities), then what only this adapter
knows: egress rules it can never honour, a workload taking the egress gateway's name, and
workloads giving one registry two different credentials (a pull secret holds one per
registry). Every problem is listed at once, each with its path; nothing is written.
Restricted egress refused where it is not known to be enforced says why (what the
NetworkPolicy canary found) and what to do; host-name rules refused without the gateway's
image name the setting.
"""

from __future__ import annotations

from collections.abc import Callable

from pando_runtime import (
    BundlePlan,
    Capability,
    CapabilityUnsupported,
    Problem,
    RuntimeCapabilities,
    TrialRequest,
    validate_plan,
)
from pando_runtime.plugin import raise_problems, validate_trial

from ..manifests._namespace_objects import pull_auth_conflicts
from ..manifests._network import AppNetwork

__all__ = ["PlanRules"]


class PlanRules:
    """The plan and trial checks of one adapter (its network settings decide some).

    ``egress_refusal``: why restricted egress is refused here and what to do (the canary's
    verdict), asked only when it is.
    """

    def __init__(self, network: AppNetwork, egress_refusal: Callable[[], str]) -> None:
        self._network = network
        self._egress_refusal = egress_refusal

    def _raise(self, problems: list[Problem], what: str) -> None:
        try:
            raise_problems(problems, what)
        except CapabilityUnsupported as error:
            lacking = {p.capability for p in problems}
            if Capability.EGRESS_RESTRICTION.value in lacking:
                remedy = self._egress_refusal()
            elif Capability.EGRESS_HOST_NAMES.value in lacking:
                remedy = (
                    "Host-name egress rules go through the egress gateway: set "
                    "'egress_gateway_image' (an image with squid), or allow CIDR blocks only."
                )
            else:
                raise
            raise CapabilityUnsupported(
                error.capability, error.message, remedy=remedy, details=error.details
            ) from None

    def bundle_problems(self, plan: BundlePlan, capabilities: RuntimeCapabilities) -> list[Problem]:
        """Every problem of ``plan`` here (empty: ``apply`` would take it)."""
        return [
            *validate_plan(plan, capabilities),
            *self._network.problems(plan.network.egress, "network.egress", plan.workloads),
            *pull_auth_conflicts(plan.workloads),
        ]

    def check_bundle(self, plan: BundlePlan, capabilities: RuntimeCapabilities) -> None:
        """Raise ``InvalidPlan`` (or ``CapabilityUnsupported``) listing every problem."""
        self._raise(self.bundle_problems(plan, capabilities), f"plan for bundle {plan.bundle_id!r}")

    def check_trial(self, request: TrialRequest, capabilities: RuntimeCapabilities) -> None:
        """Raise ``InvalidPlan`` (or ``CapabilityUnsupported``) listing every problem."""
        self._raise(
            [
                *validate_trial(request, capabilities),
                *self._network.problems(request.egress, "egress"),
            ],
            f"trial {request.trial_id!r}",
        )
