"""A host's reconcile loop: plan, apply, watch events, re-apply what ended, resync on MISSED.

The runtime only reports; the host decides. Here the host restarts a workload
that exits, up to a limit, then marks the app failed and stops restarting it.
On ``MISSED`` (events may have been lost) it re-observes every app it owns.
Against the fake adapter, whose ``flaky`` image crashes on start:

    python examples/reconcile_loop.py
"""

from __future__ import annotations

import sys

import anyio
import attrs

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter, ImageBehaviour

MAX_RESTARTS = 3


@attrs.define
class AppState:
    """What the host remembers of one app."""

    plan: pr.BundlePlan
    restarts: int = 0
    failed: bool = False


class Host:
    """A miniature control plane: it owns the desired state and reconciles the runtime to it."""

    def __init__(self, runtime: pr.RuntimeAdapter) -> None:
        self.runtime = runtime
        self.apps: dict[str, AppState] = {}
        self.journal: list[str] = []

    def say(self, line: str) -> None:
        self.journal.append(line)
        print(line)

    async def deploy(self, plan: pr.BundlePlan) -> None:
        pr.check_plan(plan, await self.runtime.capabilities())
        self.apps[plan.bundle_id] = AppState(plan=plan)
        await self.runtime.apply(plan)
        self.say(f"deployed {plan.bundle_id}")

    async def reconcile(self, bundle_id: str) -> None:
        """Bring one app back to its plan, unless it has failed for good."""
        app = self.apps[bundle_id]
        if app.failed:
            return
        observed = await self.runtime.observe(pr.BundleRef(bundle_id))
        ended = [w.name for w in observed.workloads if w.exit_code is not None]
        if not ended:
            return
        if app.restarts >= MAX_RESTARTS:
            app.failed = True
            self.say(
                f"{bundle_id}: {', '.join(ended)} ended {app.restarts + 1} times; "
                "marked failed, not restarting"
            )
            return
        app.restarts += 1
        await self.runtime.apply(app.plan)  # apply replaces ended workloads, keeps the rest
        self.say(f"{bundle_id}: restarted {', '.join(ended)} (restart {app.restarts})")

    async def run(self) -> None:
        """React to events until cancelled."""
        async with self.runtime.watch_bundles() as events:
            async for event in events:
                if event.kind is pr.BundleEventKind.WATCHING:
                    for bundle_id in self.apps:  # nothing is missed from here on: sweep once
                        await self.reconcile(bundle_id)
                elif event.kind is pr.BundleEventKind.MISSED:
                    self.say("events were missed: resync every app")
                    for bundle_id in self.apps:
                        await self.reconcile(bundle_id)
                elif event.kind in (pr.BundleEventKind.EXITED, pr.BundleEventKind.OOM_KILLED):
                    self.say(
                        f"{event.bundle_id}/{event.workload} {event.kind.value} "
                        f"(exit {event.exit_code})"
                    )
                    if event.bundle_id in self.apps:
                        await self.reconcile(event.bundle_id)


async def main() -> int:
    fake = FakeAdapter()
    fake.script_image("example/flaky:1", ImageBehaviour(exit_code=1, log=b"panic\n"))
    steady = pr.BundlePlan(
        bundle_id="steady", workloads=(pr.WorkloadPlan(name="web", image="example/web:1"),)
    )
    flaky = pr.BundlePlan(
        bundle_id="flaky", workloads=(pr.WorkloadPlan(name="worker", image="example/flaky:1"),)
    )
    host = Host(fake)
    async with fake, anyio.create_task_group() as group:
        group.start_soon(host.run)
        await anyio.wait_all_tasks_blocked()
        await host.deploy(steady)
        await host.deploy(flaky)
        with anyio.fail_after(5):
            while not host.apps["flaky"].failed:
                await anyio.sleep(0.01)
        fake.simulate_gap()  # as if the watch had been cut: the host resyncs
        await anyio.wait_all_tasks_blocked()
        group.cancel_scope.cancel()
    print(
        f"steady app restarts: {host.apps['steady'].restarts}; "
        f"flaky app failed after {host.apps['flaky'].restarts} restarts"
    )
    return 0 if host.apps["flaky"].failed and not host.apps["steady"].restarts else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
