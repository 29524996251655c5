"""Conformance: the edge in front of apps."""

from __future__ import annotations

import pytest

from ..._contract._capabilities import Capability
from ..._contract._edge import EdgePlan, EdgePort
from ..._contract._errors import InvalidPlan
from ._base import ConformanceBase, Kit, since

__all__ = ["EdgeConformance"]


class EdgeConformance(ConformanceBase):
    """``apply_edge``, ``observe_edge``, ``edges`` and ``remove_edge``."""

    gate = (Capability.EDGE,)

    def _plan(self, kit: Kit) -> EdgePlan:
        return EdgePlan(
            name=kit.new_id("edge"),
            image=kit.harness.image,
            args=kit.harness.command,
            ports=(EdgePort(published=8080, target=80),),
        )

    @since("1.0")
    async def test_edge_lifecycle(self, kit: Kit) -> None:
        plan = self._plan(kit)
        kit.track_edge(plan.name)
        await kit.adapter.apply_edge(plan)
        await kit.adapter.apply_edge(plan)  # idempotent

        async def serving() -> bool:
            return (await kit.adapter.observe_edge(plan.name)).running

        await kit.eventually(serving, "the edge to serve")
        assert plan.name in await kit.adapter.edges()
        await kit.adapter.remove_edge(plan.name)

        async def gone() -> bool:
            return not (await kit.adapter.observe_edge(plan.name)).present

        await kit.eventually(gone, "the edge to be removed")
        assert plan.name not in await kit.adapter.edges()

    @since("1.0")
    async def test_absent_edge_says_why_in_words(self, kit: Kit) -> None:
        state = await kit.adapter.observe_edge(kit.new_id("edge"))
        assert not state.present
        assert not state.running
        assert state.detail

    @since("1.0")
    async def test_invalid_edge_is_refused(self, kit: Kit) -> None:
        with pytest.raises(InvalidPlan) as caught:
            await kit.adapter.apply_edge(EdgePlan(name="Bad Name", image="nope!", replicas=0))
        assert {p.path for p in caught.value.problems} >= {"name", "image", "replicas"}
