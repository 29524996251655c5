"""What an adapter's own test suite tells the conformance kit about its runtime.

The kit drives the adapter through the contract alone. A few things a test
needs cannot be done through the contract (make a workload exit with a given
code, make it write to its log), so the adapter's suite supplies a
:class:`ConformanceHarness`. Each hook the harness lacks skips the tests that
need it, with the reason; the default harness lacks them all.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import anyio

from ..._contract._capabilities import IsolationClass
from ..._replicas._settings import MembershipSettings

if TYPE_CHECKING:
    from ..._adapter._abc import RuntimeAdapter
    from ..._contract._plans import WorkloadPlan
    from ..._contract._refs import WorkloadRef

__all__ = ["ConformanceHarness", "HarnessCannot"]


class HarnessCannot(NotImplementedError):
    """Raised by a harness hook the runtime's suite cannot provide; the test is skipped."""


class ConformanceHarness:
    """Hooks and knobs of one runtime, for the conformance kit.

    Attributes:
        image: an image the runtime can start that keeps running.
        command: the command that keeps it running (empty: the image's own).
        timeout: seconds to wait for the runtime to converge.
        poll_interval: seconds between observations while waiting.
        quiet_period: seconds to watch for unwanted changes (no remediation,
            no duplicate events); short on an in-memory runtime.
        membership_settings: the lease timings of the membership tests (short, so that
            a crashed replica's lease expires within ``timeout``).
        plan_isolation: the isolation class every plan of the kit asks for (a harness of a
            sandboxed runtime sets ``SANDBOXED``, and the whole kit runs sandboxed).
    """

    image: str = "registry.example/conformance/app:1"
    command: tuple[str, ...] = ()
    timeout: float = 60.0
    poll_interval: float = 0.2
    quiet_period: float = 1.0
    membership_settings: MembershipSettings = MembershipSettings(
        lease_duration=3.0, renew_deadline=2.0, retry_period=0.25
    )
    plan_isolation: IsolationClass = IsolationClass.PROCESS

    def can(self, hook: str) -> bool:
        """Whether this harness provides ``hook`` (overrides it)."""
        return getattr(type(self), hook) is not getattr(ConformanceHarness, hook)

    async def end_workload(self, adapter: RuntimeAdapter, ref: WorkloadRef, exit_code: int) -> None:
        """Make the workload's running instance exit with ``exit_code``."""
        raise HarnessCannot("end a workload with a chosen exit code")

    async def oom_kill(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        """Make the workload's running instance die of memory exhaustion."""
        raise HarnessCannot("OOM-kill a workload")

    async def write_log(self, adapter: RuntimeAdapter, ref: WorkloadRef, data: bytes) -> None:
        """Make the workload write ``data`` (whole lines) to its log."""
        raise HarnessCannot("make a workload write to its log")

    async def unpullable_image(self, adapter: RuntimeAdapter) -> str:
        """An image reference the runtime cannot fetch (absent from its registry, say)."""
        raise HarnessCannot("name an image the runtime cannot pull")

    async def slow_stop_workload(self, adapter: RuntimeAdapter, name: str) -> WorkloadPlan:
        """A workload called ``name`` that keeps running a few seconds after it is told to end.

        As an app that traps SIGTERM and finishes its work first: ``stop`` and ``destroy``
        leave it running a while, and ``observe`` must say so (``stopping``).
        """
        raise HarnessCannot("run a workload that ends slowly when told to stop")

    async def instance_runs(
        self, adapter: RuntimeAdapter, ref: WorkloadRef, instance_id: str
    ) -> bool:
        """Whether instance ``instance_id`` of ``ref`` still runs, asked of the runtime itself.

        Never through the adapter's ``observe``: on a real runtime, whether its container
        still answers.
        """
        raise HarnessCannot("tell whether an instance still runs")

    async def cause_event_gap(self, adapter: RuntimeAdapter) -> None:
        """Make the runtime lose events, so that open streams must report ``MISSED``."""
        raise HarnessCannot("cause a gap in the event stream")

    async def cache_goes_stale(self, adapter: RuntimeAdapter) -> None:
        """Leave the adapter's view of the runtime unconfirmed past the adapter's bound.

        As a cache whose watch has been down too long: ``observe`` must refuse to answer.
        """
        raise HarnessCannot("leave the adapter's cache unconfirmed past its bound")

    async def cache_unconfirmed(self, adapter: RuntimeAdapter) -> None:
        """Leave the adapter's view of the runtime unconfirmed, but within its bound.

        As a restarted adapter answering from its saved cache, or a cache whose watch is
        silent: ``observe`` must still answer at once, saying when its state was confirmed.
        :meth:`cache_recovers` ends it.
        """
        raise HarnessCannot("leave the adapter's cache unconfirmed within its bound")

    async def cache_recovers(self, adapter: RuntimeAdapter) -> None:
        """Undo :meth:`cache_goes_stale`: the runtime confirms the adapter's view again."""
        raise HarnessCannot("let the adapter's cache recover")

    async def runtime_hangs(self, adapter: RuntimeAdapter) -> None:
        """Freeze the runtime with its connections open: nothing answers, nothing closes.

        As a deadlocked daemon, a paused API server or a link that drops packets (unlike
        :meth:`cache_goes_stale`, whose cut may close connections): an adapter must find it out
        by itself. :meth:`runtime_answers` ends it.
        """
        raise HarnessCannot("freeze the runtime with its connections open")

    async def runtime_answers(self, adapter: RuntimeAdapter) -> None:
        """Undo :meth:`runtime_hangs`: the runtime answers again (a no-op when it does)."""
        raise HarnessCannot("let a frozen runtime answer again")

    async def lose_node(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        """Cut off the place (node) that runs the workload's instance.

        It stops reporting, as a node cut off from the control plane; what runs there keeps
        running. The runtime has another place a new instance can start on.
        """
        raise HarnessCannot("cut off the node a workload runs on")

    async def recover_node(self, adapter: RuntimeAdapter) -> None:
        """Undo :meth:`lose_node`: the place reports again (a no-op when none is lost)."""
        raise HarnessCannot("bring a lost node back")

    async def running_instances(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> int:
        """How many instances of the workload run, counted on the runtime's places.

        Counted on the places themselves (one that does not report included), not through
        the adapter.
        """
        raise HarnessCannot("count a workload's instances on the runtime's places")

    def replica(
        self, adapter: RuntimeAdapter
    ) -> contextlib.AbstractAsyncContextManager[RuntimeAdapter]:
        """Another host replica's adapter over the same runtime (its own ``membership``).

        ``async with harness.replica(adapter) as other:``; it is closed when the block ends.
        """
        raise HarnessCannot("make a second replica of the adapter")

    def echo_stdin_command(self) -> tuple[str, ...]:
        """A command that copies its stdin to its stdout."""
        return ("cat",)

    def exit_command(self, exit_code: int) -> tuple[str, ...]:
        """A command that exits with ``exit_code``."""
        return ("sh", "-c", f"exit {exit_code}")

    def print_command(self, out: str, err: str) -> tuple[str, ...]:
        """A command that prints ``out`` on stdout and ``err`` on stderr."""
        return ("sh", "-c", f"printf %s '{out}'; printf %s '{err}' >&2")

    async def settle(self) -> None:
        """Wait for the runtime to have acted on what was just done (default: a checkpoint)."""
        await anyio.lowlevel.checkpoint()
