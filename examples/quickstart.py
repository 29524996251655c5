"""A full app lifecycle through the pando-runtime contract.

A two-workload app (a database with a volume, and a web server that depends on
it) is validated, applied, observed, watched, its logs read, a command run in
it, its volume snapshotted, then destroyed. By default on the in-memory fake
adapter; ``--adapter kubernetes --kubeconfig FILE`` runs the very same code
on a cluster.

    python examples/quickstart.py
    python examples/quickstart.py --adapter kubernetes --kubeconfig ~/.kube/config
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

import pando_runtime as pr

APP = "quickstart"

PlanMaker = Callable[[pr.RuntimeCapabilities], pr.BundlePlan]
"""What makes the app's plan for a runtime's capabilities (:func:`make_plan` unless a runtime
that really runs containers needs images it holds)."""


def make_plan(caps: pr.RuntimeCapabilities) -> pr.BundlePlan:
    """The app, as a host's planner makes it for this runtime's capabilities."""
    volumes = caps.persistent_volumes  # a host plans around what the runtime lacks
    return pr.BundlePlan(
        bundle_id=APP,
        workloads=(
            pr.WorkloadPlan(
                name="web",
                image="registry.example/shop/web:1.4",
                command=("web", "--port", "8080"),
                env={"DATABASE_URL": "postgres://db:5432/shop"},
                ports=(pr.Port(8080),),
                depends_on=("db",),
                health=pr.HealthCheck(http_path="/healthz", port=8080),
                resources=pr.Resources(cpu_millis=250, memory_bytes=256 * 1024**2),
                exposed=True,
            ),
            pr.WorkloadPlan(
                name="db",
                image="registry.example/shop/postgres:16",
                env={"POSTGRES_PASSWORD": "only-the-runtime-sees-this"},
                ports=(pr.Port(5432),),
                mounts=(pr.Mount("shop-data", "/var/lib/postgresql/data"),) if volumes else (),
                health=pr.HealthCheck(command=("pg_isready",)),
                resources=pr.Resources(cpu_millis=500, memory_bytes=512 * 1024**2),
            ),
        ),
        volumes=(pr.VolumePlan(volume_id="shop-data", name="database", size_bytes=1024**3),)
        if volumes
        else (),
        labels={"pando.dev/app": "shop"},
    )


def teach_the_fake(adapter: pr.RuntimeAdapter) -> None:
    """The fake runs nothing: tell it what these images print and how `pg_isready` answers."""
    from pando_runtime.testing import FakeAdapter, ImageBehaviour, scripted  # noqa: PLC0415

    if not isinstance(adapter, FakeAdapter):
        return
    adapter.script_image(
        "registry.example/shop/web:1.4",
        ImageBehaviour(log=b"web: connected to db\nweb: listening on :8080\n"),
    )
    adapter.script_image(
        "registry.example/shop/postgres:16",
        ImageBehaviour(log=b"db: ready to accept connections\n"),
    )
    adapter.on_exec(("pg_isready",), scripted(stdout=b"/run/postgresql:5432 - accepting\n"))


def show(title: str, value: Any = None) -> None:
    """Print a step, and a value as JSON when given."""
    print(f"\n== {title}")
    if value is not None:
        print(json.dumps(pr.unstructure(value), indent=2, default=str))


async def record_events(
    adapter: pr.RuntimeAdapter,
    into: list[str],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Watch the runtime's events and keep this app's, one line each."""
    async with adapter.watch_bundles() as events:
        first = await anext(events)  # WATCHING: from here on nothing is missed
        into.append(f"{first.kind.value:>14}")
        task_status.started()
        async for event in events:
            if event.bundle_id == APP:
                detail = f" exit={event.exit_code}" if event.exit_code is not None else ""
                into.append(f"{event.kind.value:>14} {event.workload or ''}{detail}")


async def lifecycle(
    adapter: pr.RuntimeAdapter,
    patience: float,
    probe: tuple[str, ...] = ("pg_isready",),
    plan_for: PlanMaker = make_plan,
) -> None:
    """Plan, apply, observe, watch, read logs, exec, snapshot and destroy one app."""
    caps = await adapter.capabilities()
    show(f"adapter {adapter.kind}: capabilities", sorted(c.value for c in caps.supported))
    plan = plan_for(caps)
    await adapter.health_check()

    problems = pr.validate_plan(plan, caps)
    show("plan validated", [str(p) for p in problems] or "no problems")
    if problems:
        raise SystemExit(2)
    async with adapter.read_scope():
        show("capacity before", await adapter.capacity())

    lines: list[str] = []
    async with anyio.create_task_group() as group:
        if caps.bundle_events:
            await group.start(record_events, adapter, lines)
        handle = await adapter.apply(plan)
        show("applied", handle)
        with anyio.fail_after(patience):
            while not (observed := await adapter.observe(handle.ref)).all_running:
                await anyio.sleep(0.5)
        show("observed (no environment in it, by design)", observed)
        await adapter.apply(plan)
        show("applied again: nothing changed", await adapter.observe(handle.ref) == observed)
        await anyio.sleep(0.5)
        group.cancel_scope.cancel()
    show("events")
    print("\n".join(lines))

    async with adapter.logs(pr.WorkloadRef(APP, "web"), pr.LogOptions(tail=10)) as stream:
        show("logs of web")
        print((await pr.read_all(stream)).decode(errors="replace"), end="")

    if caps.exec:
        result = await adapter.run(pr.WorkloadRef(APP, "db"), pr.ExecRequest(command=probe))
        show(f"exec {shlex.join(probe)} in db: exit {result.exit_code}")
        print(result.stdout.decode(errors="replace"), end="")

    if caps.persistent_volumes:
        volume = (await adapter.observe(handle.ref)).volume("shop-data")
        if volume.handle is not None:
            async with adapter.snapshot_volume(volume.handle) as stream:
                snapshot = await pr.read_all(stream)
            show(f"volume snapshot: {len(snapshot)} bytes of tar")

    show("upstream for the host's proxy", adapter.upstream(pr.WorkloadRef(APP, "web"), 8080))
    await adapter.destroy(handle.ref, pr.DestroyOptions(keep_volumes=False))
    with anyio.fail_after(patience):
        while (await adapter.observe(handle.ref)).exists:
            await anyio.sleep(0.5)
    show("destroyed", await adapter.observe(handle.ref))


async def main(argv: list[str] | None = None, plan_for: PlanMaker = make_plan) -> int:
    """Run the lifecycle on the adapter the command line names (the app planned by
    ``plan_for``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", default="fake", help="adapter name (default: fake)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (kubernetes adapter)")
    parser.add_argument("--context", help="kubeconfig context (kubernetes adapter)")
    parser.add_argument("--config", default="{}", help="adapter settings as JSON")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--probe", default="pg_isready", help="command exec runs in db")
    args = parser.parse_args(argv)
    config = json.loads(args.config)
    if args.kubeconfig:
        config.setdefault("kubeconfig", args.kubeconfig)
    if args.context:
        config.setdefault("context", args.context)
    try:
        async with pr.load_adapter(args.adapter, config) as adapter:
            teach_the_fake(adapter)
            await lifecycle(adapter, args.timeout, tuple(shlex.split(args.probe)), plan_for)
    except pr.PandoRuntimeError as error:
        print(f"error {error.code}: {error.message}\nremedy: {error.remedy}", file=sys.stderr)
        return 1
    print("\nlifecycle complete")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
