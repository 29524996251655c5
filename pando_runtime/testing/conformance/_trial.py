"""Conformance: trial runs."""

from __future__ import annotations

import anyio

from ..._contract._capabilities import Capability
from ..._contract._trial import TrialRequest
from ._base import ConformanceBase, Kit, since

__all__ = ["TrialConformance"]


class TrialConformance(ConformanceBase):
    """``trial`` runs an image once, alone, and reports what it did."""

    gate = (Capability.TRIAL_RUN,)

    @since("1.0")
    async def test_trial_runs_the_image(self, kit: Kit) -> None:
        request = TrialRequest(
            trial_id=kit.new_id("trial"),
            image=kit.harness.image,
            command=kit.harness.command,
            timeout_seconds=5,
        )
        with anyio.fail_after(kit.harness.timeout + request.timeout_seconds):
            result = await kit.adapter.trial(request)
        assert result.started
        assert len(result.log) <= 64 * 1024
        if not kit.caps.write_observation:
            assert result.observed_writes == ()
