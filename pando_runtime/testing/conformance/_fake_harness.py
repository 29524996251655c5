"""The fake runtime's hooks for the conformance kit, and a fake that plays the kit's commands.

The fake passes the whole kit with these (``tests/test_conformance_fake.py``); a fleet with fake
members passes it with one per member (:class:`FleetHarness`). A host's own suite may use them
too, to run the kit over a wrapper of the fake (its instrumentation, a retry policy).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ..._adapter._abc import RuntimeAdapter
from ..._contract._observed import WorkloadProblem
from ..._contract._plans import WorkloadPlan
from ..._contract._refs import WorkloadRef
from ..._replicas._settings import MembershipSettings
from .._fake import FakeAdapter, ImageBehaviour
from .._fake_exec import ExecContext, scripted
from ._harness import ConformanceHarness

__all__ = ["FakeHarness", "scripted_fake"]

SLOW_STOP = 4.0
"""Seconds of the fake's clock the slow-stopping workload runs after it is told to end."""


class FakeHarness(ConformanceHarness):
    """Hooks of the fake runtime: its own test controls."""

    timeout = 5.0
    poll_interval = 0.0
    quiet_period = 0.05
    membership_settings = MembershipSettings(
        lease_duration=1.2, renew_deadline=0.8, retry_period=0.1
    )

    @contextlib.asynccontextmanager
    async def replica(self, adapter: RuntimeAdapter) -> AsyncIterator[RuntimeAdapter]:
        assert isinstance(adapter, FakeAdapter)
        yield adapter.replica()

    async def end_workload(self, adapter: RuntimeAdapter, ref: WorkloadRef, exit_code: int) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.exit_workload(ref, exit_code)

    async def oom_kill(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.oom_kill(ref)

    async def write_log(self, adapter: RuntimeAdapter, ref: WorkloadRef, data: bytes) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.write_log(ref, data)

    async def cause_event_gap(self, adapter: RuntimeAdapter) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.simulate_gap()

    async def unpullable_image(self, adapter: RuntimeAdapter) -> str:
        assert isinstance(adapter, FakeAdapter)
        image = "registry.example/conformance/absent:1"
        detail = f"{image}: not found"
        adapter.script_image(
            image, ImageBehaviour(problem=WorkloadProblem.IMAGE_PULL, problem_detail=detail)
        )
        return image

    async def slow_stop_workload(self, adapter: RuntimeAdapter, name: str) -> WorkloadPlan:
        assert isinstance(adapter, FakeAdapter)
        image = "registry.example/conformance/slow-stop:1"
        adapter.script_image(image, ImageBehaviour(stop_grace=SLOW_STOP))
        return WorkloadPlan(name=name, image=image)

    async def instance_runs(
        self, adapter: RuntimeAdapter, ref: WorkloadRef, instance_id: str
    ) -> bool:
        """Asked of the fake's world; each look lets a second of its clock pass."""
        assert isinstance(adapter, FakeAdapter)
        adapter.clock.advance(1.0)
        return adapter.instance_runs(ref, instance_id)

    async def cache_goes_stale(self, adapter: RuntimeAdapter) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.simulate_cache_down()
        adapter.clock.advance(adapter.config.max_staleness + 1)

    async def cache_unconfirmed(self, adapter: RuntimeAdapter) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.simulate_cache_down()
        adapter.clock.advance(adapter.config.max_staleness / 2)

    async def cache_recovers(self, adapter: RuntimeAdapter) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.simulate_cache_up()

    async def runtime_hangs(self, adapter: RuntimeAdapter) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.simulate_hang()
        adapter.clock.advance(adapter.config.max_staleness + 1)

    async def runtime_answers(self, adapter: RuntimeAdapter) -> None:
        assert isinstance(adapter, FakeAdapter)
        adapter.simulate_answer()

    async def lose_node(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        assert isinstance(adapter, FakeAdapter)
        node = adapter.placement(ref)
        assert node is not None, f"{ref} runs nowhere"
        adapter.lose_node(node)

    async def recover_node(self, adapter: RuntimeAdapter) -> None:
        assert isinstance(adapter, FakeAdapter)
        for node in [n.name for n in adapter.nodes]:
            adapter.recover_node(node)

    async def running_instances(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> int:
        assert isinstance(adapter, FakeAdapter)
        return adapter.instances_running(ref)


async def _cat(context: ExecContext) -> int:
    await context.stdout.send(await context.read_stdin())
    return 0


def scripted_fake() -> FakeAdapter:
    """A fake whose exec plays the harness's commands as a shell would."""
    fake = FakeAdapter()
    fake.on_exec(("cat",), _cat)
    for code in (0, 3):
        fake.on_exec(("sh", "-c", f"exit {code}"), scripted(exit_code=code))
    fake.on_exec(
        ("sh", "-c", "printf %s 'to-out'; printf %s 'to-err' >&2"),
        scripted(stdout=b"to-out", stderr=b"to-err"),
    )
    return fake
