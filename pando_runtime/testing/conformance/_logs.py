"""Conformance: workload logs."""

from __future__ import annotations

import anyio
import pytest

from ..._contract._errors import NotFound
from ..._contract._log_options import LogOptions
from ..._contract._refs import WorkloadRef
from ..._contract._streams import read_all
from ._base import ConformanceBase, Kit, since

__all__ = ["LogConformance"]


class LogConformance(ConformanceBase):
    """``logs``: the newest instance's log, a finished one included."""

    @since("1.0")
    async def test_log_of_a_finished_workload_can_be_read(self, kit: Kit) -> None:
        kit.needs("end_workload", "write_log")
        plan = kit.plan()
        await kit.applied_and_running(plan)
        ref = kit.ref(plan)
        await kit.harness_call(kit.harness.write_log(kit.adapter, ref, b"conformance says hi\n"))
        await kit.harness_call(kit.harness.end_workload(kit.adapter, ref, 2))
        await kit.until_observed(
            plan, lambda o: o.workloads[0].exit_code is not None, "the workload to end"
        )
        async with kit.adapter.logs(ref) as stream:
            with anyio.fail_after(kit.harness.timeout):
                log = await read_all(stream)
        assert b"conformance says hi" in log

    @since("1.0")
    async def test_tail_keeps_the_last_lines(self, kit: Kit) -> None:
        kit.needs("write_log")
        plan = kit.plan()
        await kit.applied_and_running(plan)
        ref = kit.ref(plan)
        await kit.harness_call(kit.harness.write_log(kit.adapter, ref, b"first\nsecond\nlast\n"))
        async with kit.adapter.logs(ref, LogOptions(tail=1)) as stream:
            with anyio.fail_after(kit.harness.timeout):
                log = await read_all(stream)
        assert log.splitlines() == [b"last"]

    @since("1.0")
    async def test_follow_ends_when_the_host_cancels(self, kit: Kit) -> None:
        plan = kit.plan()
        await kit.applied_and_running(plan)
        with anyio.move_on_after(kit.harness.quiet_period) as scope:
            async with kit.adapter.logs(kit.ref(plan), LogOptions(follow=True)) as stream:
                await read_all(stream)
        assert scope.cancelled_caught, "a followed log stays open until the host closes it"

    @since("1.0")
    async def test_logs_of_unknown_workload_is_not_found(self, kit: Kit) -> None:
        with pytest.raises(NotFound):
            async with kit.adapter.logs(WorkloadRef(kit.new_id("absent"), "web")) as stream:
                await read_all(stream)
