"""The conformance kit: a runtime that hangs, its connections open (not one that closes them).

A runtime rarely dies cleanly: a deadlocked daemon, a paused API server or a partition that
drops packets leaves every connection open and answers nothing, and an adapter whose watch
"looks connected" may take its quiet for news that nothing changed. The harness freezes the
runtime (``runtime_hangs``); the adapter must then refuse state unconfirmed past its own bound
(saying when it was confirmed, and for how long it has not been), refuse to report a write as
done from such a view, and answer again once the runtime does.
"""

from __future__ import annotations

import pytest

from ..._contract._errors import AdapterUnavailable
from ..._contract._observed import ObservedBundle
from ..._contract._plans import BundlePlan
from ._base import ConformanceBase, Kit, since

__all__ = ["HungRuntimeConformance"]


async def _refusal(kit: Kit, plan: BundlePlan) -> AdapterUnavailable | None:
    try:
        await kit.observe(plan)
    except AdapterUnavailable as error:
        return error
    return None


async def _answer(kit: Kit, plan: BundlePlan) -> ObservedBundle | None:
    try:
        return await kit.observe(plan)
    except AdapterUnavailable:
        return None


class HungRuntimeConformance(ConformanceBase):
    """A runtime frozen with its connections open: refused past the bound, found again."""

    @since("1.7")
    async def test_a_hung_runtime_is_refused_past_the_bound_and_answers_again(
        self, kit: Kit
    ) -> None:
        kit.needs("runtime_hangs", "runtime_answers")
        plan = kit.plan(kit.workload("web"))
        before = await kit.applied_and_running(plan)
        await kit.harness.runtime_hangs(kit.adapter)
        try:
            refused = await kit.eventually(
                lambda: _refusal(kit, plan), "observe to refuse the hung runtime's state"
            )
            # Compared with that view, "nothing to write" would be a guess: no success.
            with pytest.raises(AdapterUnavailable):
                await kit.adapter.apply(plan)
        finally:
            await kit.harness.runtime_answers(kit.adapter)
        assert "confirmed_at" in refused.details, refused.details
        assert float(refused.details["stale_for"]) > 0
        observed = await kit.eventually(lambda: _answer(kit, plan), "observe to answer again")
        assert observed.exists
        if before.confirmed_at is not None:
            assert observed.confirmed_at is not None
            assert observed.confirmed_at > before.confirmed_at
