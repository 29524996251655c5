"""One replica of a host that runs several: it applies the apps it owns, and journals it.

Start one process per replica, each under its own name, with the same adapter settings and the
same list of apps; they share the apps out through the adapter's membership
(``docs/replicas.md``)::

    python examples/replicas/replica_host.py --config adapter.json --replica a --apps 300 \\
        --journal a.jsonl
    python examples/replicas/replica_host.py --config adapter.json --replica b --apps 300 \\
        --journal b.jsonl
    python examples/replicas/replica_host.py --config adapter.json --replica c --apps 300 \\
        --journal c.jsonl

``adapter.json`` holds the adapter's settings (for ``kubernetes``: ``kubeconfig``, ``context``,
...; for ``--adapter fleet``: its ``members`` and the ``lease_store`` they share). The apps are
``<prefix>-0`` .. ``<prefix>-<N-1>``, each one workload (``--image``, ``--command``). A replica
applies every app it owns (``--parallel`` at once), once per time it gains it, and again every
``--reapply`` seconds when given (the owner's next apply is what repairs a stale write on
Docker, ``docs/replicas.md``), and goes on following the membership's changes; SIGTERM (or
Ctrl-C) leaves the membership cleanly (its apps move to the others at once); SIGKILL is a crash
(they move once its lease has expired).

The journal is JSON lines, one event each, flushed as written, every one with ``t`` (wall time,
seconds since the epoch) and ``replica``:

- ``{"event": "joined", "members": [...]}`` once the replica is a member;
- ``{"event": "gained" | "lost", "apps": [...], "members": [...]}`` whenever what it owns
  changes (a gained app is journaled before anything is written for it);
- ``{"event": "apply", "phase": "start", "app": ...}`` and ``{"event": "apply", "phase": "end",
  "app": ..., "result": "applied" | <error code>}`` around each apply (an error's ``message``
  too);
- ``{"event": "left"}`` after a clean leave.

This uses the library's public API only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import anyio

import pando_runtime as pr

OWNERSHIP_POLL = 0.05
"""Seconds between looks at what this replica owns (a pure, local check: no API call)."""


class Journal:
    """JSON lines, flushed per line, so a killed process leaves every event it wrote."""

    def __init__(self, stream: IO[str], replica: str) -> None:
        self._stream = stream
        self._replica = replica

    def write(self, event: str, **fields: Any) -> None:
        line = {"t": time.time(), "replica": self._replica, "event": event, **fields}
        self._stream.write(json.dumps(line) + "\n")
        self._stream.flush()


def app_ids(prefix: str, count: int) -> list[str]:
    """The host's list of apps: every replica has the same one."""
    return [f"{prefix}-{n}" for n in range(count)]


def app_plan(app_id: str, image: str, command: Sequence[str] = ()) -> pr.BundlePlan:
    web = pr.WorkloadPlan(name="web", image=image, command=tuple(command))
    return pr.BundlePlan(bundle_id=app_id, workloads=(web,))


class Owned:
    """What this replica owns among the host's apps, journaled as it changes."""

    def __init__(self, membership: pr.Membership, ids: Sequence[str], journal: Journal) -> None:
        self._membership = membership
        self._ids = ids
        self._journal = journal
        self.apps: frozenset[str] = frozenset()
        self.changed = anyio.Event()

    def refresh(self) -> frozenset[str]:
        """Look again (no API call); journal what was gained and lost since the last look."""
        now = frozenset(i for i in self._ids if self._membership.owns(i))
        lost, gained = self.apps - now, now - self.apps
        members = sorted(self._membership.members())
        if lost:
            self._journal.write("lost", apps=sorted(lost), members=members)
        if gained:
            self._journal.write("gained", apps=sorted(gained), members=members)
        self.apps = now
        if lost or gained:
            self.changed.set()
            self.changed = anyio.Event()
        return now

    async def follow(self) -> None:
        # Ownership can also end without a change event (a lease not renewed in time).
        while True:
            self.refresh()
            await anyio.sleep(OWNERSHIP_POLL)


async def apply_one(
    adapter: pr.RuntimeAdapter, owned: Owned, journal: Journal, plan: pr.BundlePlan
) -> bool:
    """Apply one app if this replica still owns it; whether it is applied."""
    if plan.bundle_id not in owned.refresh():  # re-checked: the apps before took a while
        return False
    journal.write("apply", phase="start", app=plan.bundle_id)
    try:
        await adapter.apply(plan)
    except pr.PandoRuntimeError as error:  # NotOwner after a loss, or the API is down
        journal.write(
            "apply", phase="end", app=plan.bundle_id, result=error.code, message=error.message
        )
        return False
    journal.write("apply", phase="end", app=plan.bundle_id, result="applied")
    return True


async def apply_owned(
    adapter: pr.RuntimeAdapter, owned: Owned, journal: Journal, args: argparse.Namespace
) -> None:
    """Apply each app this replica owns, once per time it gains it (and every ``--reapply``
    seconds when given); then wait for a change."""
    limiter = anyio.CapacityLimiter(args.parallel)
    command = shlex.split(args.command) if args.command else ()
    done: set[str] = set()
    reapply_at = time.monotonic() + (args.reapply or math.inf)

    async def one(app_id: str) -> None:
        async with limiter:
            if await apply_one(adapter, owned, journal, app_plan(app_id, args.image, command)):
                done.add(app_id)

    while True:
        changed = owned.changed
        if time.monotonic() >= reapply_at:
            done.clear()  # every owned app once more
            reapply_at = time.monotonic() + args.reapply
        async with anyio.create_task_group() as group:
            for app_id in sorted(owned.refresh() - done):
                group.start_soon(one, app_id)
        done.intersection_update(owned.refresh())  # an app lost and gained again: again
        if owned.apps <= done:
            with anyio.move_on_after(max(reapply_at - time.monotonic(), 0)):
                await changed.wait()
        else:
            await anyio.sleep(args.retry_period)  # some failed or were gained meanwhile


async def run(args: argparse.Namespace, config: Any, journal: Journal) -> None:
    settings = pr.MembershipSettings(
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )
    ids = app_ids(args.prefix, args.apps)
    async with (
        pr.load_adapter(args.adapter, config) as adapter,
        adapter.membership(args.replica, settings) as membership,
        anyio.create_task_group() as group,
    ):
        journal.write("joined", members=sorted(membership.members()))
        owned = Owned(membership, ids, journal)
        group.start_soon(owned.follow)
        group.start_soon(apply_owned, adapter, owned, journal, args)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        group.cancel_scope.cancel()
    journal.write("left")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = pr.MembershipSettings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", help="a JSON file of the adapter's settings")
    parser.add_argument("--adapter", default="kubernetes", help="the adapter's name")
    parser.add_argument("--replica", required=True, help="this replica's name (a DNS label)")
    parser.add_argument("--apps", type=int, required=True, help="how many apps the host runs")
    parser.add_argument("--prefix", default="app", help="the apps' ids: <prefix>-<n>")
    parser.add_argument("--image", default="registry.example/app:1", help="every app's image")
    parser.add_argument("--command", default="", help="every app's command (a shell-like line)")
    parser.add_argument("--parallel", type=int, default=4, help="applies at once")
    parser.add_argument(
        "--reapply", type=float, default=0.0, help="apply every owned app again each N seconds"
    )
    parser.add_argument("--lease-duration", type=float, default=defaults.lease_duration)
    parser.add_argument("--renew-deadline", type=float, default=defaults.renew_deadline)
    parser.add_argument("--retry-period", type=float, default=defaults.retry_period)
    parser.add_argument("--journal", required=True, help="where to write the JSON-lines journal")
    return parser.parse_args(argv)


@contextlib.contextmanager
def opened(path: str) -> Iterator[IO[str]]:
    with Path(path).open("a", encoding="utf-8") as stream:
        yield stream


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = json.loads(Path(args.config).read_text()) if args.config else None
    with opened(args.journal) as stream:
        journal = Journal(stream, args.replica)
        try:
            anyio.run(run, args, config, journal)
        except pr.PandoRuntimeError as error:  # bad settings, or the runtime unreachable
            journal.write("failed", code=error.code, message=error.message)
            print(f"{error.code}: {error.message}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
