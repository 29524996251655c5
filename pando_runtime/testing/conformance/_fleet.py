"""The conformance kit's hooks for a fleet: each hook sent to the harness of the app's member.

A fleet's suite passes the kit with the harnesses of its members' runtimes, each acting on its
member adapter. A hook about one workload goes to the harness of the member that holds it
(found as the fleet finds it); one about the runtime as a whole (an event gap, a stale cache)
goes to every member's. A hook some member's harness lacks is lacking for the fleet too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from ._harness import ConformanceHarness, HarnessCannot

if TYPE_CHECKING:
    from ..._adapter._abc import RuntimeAdapter
    from ..._contract._plans import WorkloadPlan
    from ..._contract._refs import WorkloadRef

__all__ = ["FleetHarness"]

_SAME_ANSWER = frozenset({"unpullable_image", "slow_stop_workload"})


def _members(adapter: RuntimeAdapter) -> Mapping[str, RuntimeAdapter]:
    members: Mapping[str, RuntimeAdapter] | None = getattr(adapter, "members", None)
    if members is None:
        raise TypeError(f"{type(adapter).__name__} is not a fleet (it has no members)")
    return members


class FleetHarness(ConformanceHarness):
    """Hooks of a fleet, made of its members' harnesses by member name.

    ``primary``: the member whose harness gives the image and the poll interval (an image every
    member can run); the timeouts and quiet periods are the longest of any member's.
    ``commands``: the member whose harness gives the exec tests' commands (default: the
    primary), for members whose harnesses need different ones (a command every member runs
    alike).
    """

    def __init__(
        self,
        members: Mapping[str, ConformanceHarness],
        primary: str,
        *,
        commands: str | None = None,
    ) -> None:
        self.harnesses = dict(members)
        lead = self.harnesses[primary]
        self.image = lead.image
        self.command = lead.command
        self.timeout = max(h.timeout for h in self.harnesses.values())
        self.poll_interval = lead.poll_interval
        self.quiet_period = max(h.quiet_period for h in self.harnesses.values())
        self.membership_settings = lead.membership_settings
        self._lead = lead
        self._commands = self.harnesses[commands or primary]
        self._homes: dict[str, str] = {}

    def can(self, hook: str) -> bool:
        """Whether every member's harness provides ``hook``.

        A hook whose answer must suit every member (an image none can pull, a workload every
        one stops slowly) only where the members' harnesses are of one kind: harnesses of
        different runtimes answer differently.
        """
        if hook in _SAME_ANSWER and len({type(h) for h in self.harnesses.values()}) > 1:
            return False
        return all(h.can(hook) for h in self.harnesses.values())

    async def _of(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> tuple[Any, RuntimeAdapter]:
        """The harness and the adapter of the member holding ``ref``'s bundle."""
        name = await adapter.locate(ref.bundle_id)  # type: ignore[attr-defined]
        if name is None:  # gone from the fleet's view: where it was last found
            name = self._homes.get(ref.bundle_id)
        if name is None:
            raise HarnessCannot(f"find a member holding {ref.bundle_id!r}")
        self._homes[ref.bundle_id] = name
        return self.harnesses[name], _members(adapter)[name]

    async def _each(self, adapter: RuntimeAdapter, hook: str, *args: Any) -> list[Any]:
        """``hook`` of every member's harness on its member, one after the other."""
        members = _members(adapter)
        return [await getattr(h, hook)(members[n], *args) for n, h in self.harnesses.items()]

    async def _same(self, adapter: RuntimeAdapter, hook: str, *args: Any) -> Any:
        """``hook`` on every member, when each gives the same answer (a plan for any member)."""
        answers = await self._each(adapter, hook, *args)
        if any(a != answers[0] for a in answers):
            raise HarnessCannot(f"{hook}: the members' harnesses answer differently")
        return answers[0]

    async def end_workload(self, adapter: RuntimeAdapter, ref: WorkloadRef, exit_code: int) -> None:
        """The member's harness ends it."""
        harness, member = await self._of(adapter, ref)
        await harness.end_workload(member, ref, exit_code)

    async def oom_kill(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        """The member's harness kills it."""
        harness, member = await self._of(adapter, ref)
        await harness.oom_kill(member, ref)

    async def write_log(self, adapter: RuntimeAdapter, ref: WorkloadRef, data: bytes) -> None:
        """The member's harness makes it write."""
        harness, member = await self._of(adapter, ref)
        await harness.write_log(member, ref, data)

    async def unpullable_image(self, adapter: RuntimeAdapter) -> str:
        """One image no member can pull (each member's harness names the same)."""
        image: str = await self._same(adapter, "unpullable_image")
        return image

    async def slow_stop_workload(self, adapter: RuntimeAdapter, name: str) -> WorkloadPlan:
        """A slow-stopping workload every member runs alike."""
        plan: WorkloadPlan = await self._same(adapter, "slow_stop_workload", name)
        return plan

    async def instance_runs(
        self, adapter: RuntimeAdapter, ref: WorkloadRef, instance_id: str
    ) -> bool:
        """Asked of every member's runtime (the fleet may no longer know the bundle)."""
        answers = await self._each(adapter, "instance_runs", ref, instance_id)
        return any(answers)

    async def cause_event_gap(self, adapter: RuntimeAdapter) -> None:
        """A gap on every member."""
        await self._each(adapter, "cause_event_gap")

    async def cache_goes_stale(self, adapter: RuntimeAdapter) -> None:
        """Every member's view goes stale."""
        await self._each(adapter, "cache_goes_stale")

    async def cache_unconfirmed(self, adapter: RuntimeAdapter) -> None:
        """Every member's view is left unconfirmed."""
        await self._each(adapter, "cache_unconfirmed")

    async def cache_recovers(self, adapter: RuntimeAdapter) -> None:
        """Every member's view recovers."""
        await self._each(adapter, "cache_recovers")

    async def runtime_hangs(self, adapter: RuntimeAdapter) -> None:
        """Every member's runtime hangs."""
        await self._each(adapter, "runtime_hangs")

    async def runtime_answers(self, adapter: RuntimeAdapter) -> None:
        """Every member's runtime answers again."""
        await self._each(adapter, "runtime_answers")

    async def lose_node(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        """The member's harness cuts off the workload's node."""
        harness, member = await self._of(adapter, ref)
        await harness.lose_node(member, ref)

    async def recover_node(self, adapter: RuntimeAdapter) -> None:
        """Every member's lost node comes back."""
        await self._each(adapter, "recover_node")

    async def running_instances(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> int:
        """Counted on every member's places: an instance anywhere counts."""
        return sum(await self._each(adapter, "running_instances", ref))

    def replica(
        self, adapter: RuntimeAdapter
    ) -> contextlib.AbstractAsyncContextManager[RuntimeAdapter]:
        """A fleet has no membership of its own to share."""
        raise HarnessCannot("make a second replica of a fleet")

    def echo_stdin_command(self) -> tuple[str, ...]:
        """The ``commands`` member's."""
        return self._commands.echo_stdin_command()

    def exit_command(self, exit_code: int) -> tuple[str, ...]:
        """The ``commands`` member's."""
        return self._commands.exit_command(exit_code)

    def print_command(self, out: str, err: str) -> tuple[str, ...]:
        """The ``commands`` member's."""
        return self._commands.print_command(out, err)

    async def settle(self) -> None:
        """Every member's runtime has acted."""
        async with anyio.create_task_group() as group:
            for harness in self.harnesses.values():
                group.start_soon(harness.settle)
