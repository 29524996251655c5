"""The command line's commands: what each does against the configured adapter."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import anyio

from .._adapter._abc import RuntimeAdapter
from .._adapter._registry import available_adapters, load_adapter
from .._contract._capacity import BundleUsage
from .._contract._errors import InvalidInput, NotFound, PandoRuntimeError
from .._contract._exec import ExecRequest
from .._contract._log_options import LogOptions
from .._contract._observed import ObservedBundle
from .._contract._plans import BundlePlan
from .._contract._refs import BundleRef, DestroyOptions, WorkloadRef
from .._contract._streams import IteratorByteStream
from .._contract._volumes import VolumeHandle
from .._input._convert import load_bundle_file, unstructure
from .._input._validation import validate_plan
from ._console import EXIT_FAILED, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_OK, Console, tables, yes
from ._progress import AppProgress
from ._setup import STATE_FILE, adapter_name, default_state_file, open_adapter, read_config
from ._units import cpu, size

__all__ = ["HANDLERS", "Handler"]

Handler = Callable[[argparse.Namespace, Console], Coroutine[Any, Any, int]]
"""A command: its parsed arguments and the console in, its exit code out."""


def _bundle_table(observed: ObservedBundle) -> list[list[str]]:
    rows = [["WORKLOAD", "PRESENT", "RUNNING", "HEALTHY", "EXIT", "STARTED"]]
    rows += [
        [
            w.name,
            yes(w.present),
            "stopping" if w.stopping else yes(w.running),
            yes(w.healthy),
            "-" if w.exit_code is None else str(w.exit_code),
            w.started_at.isoformat() if w.started_at else "-",
        ]
        for w in observed.workloads
    ]
    rows += [[f"volume {v.volume_id}", yes(v.present), "", "", "", ""] for v in observed.volumes]
    if not observed.exists:
        rows.append([f"(bundle {observed.bundle_id} does not exist)", "", "", "", "", ""])
    if not observed.stopping_reported:
        unsure = "(an instance told to end may still run: this adapter does not report stopping)"
        rows.append([unsure, "", "", "", "", ""])
    return rows


async def _adapters(args: argparse.Namespace, console: Console) -> int:
    infos = available_adapters()
    payload = [
        {
            "name": i.name,
            "description": i.description,
            "api_version": i.api_version,
            "problem": i.problem,
            "settings": [unstructure(f) for f in i.config_fields],
        }
        for i in infos
    ]
    if args.capabilities:
        for entry, info in zip(payload, infos, strict=True):
            if info.problem is not None:
                continue
            try:  # an adapter that needs settings or a reachable runtime says so, alone
                async with load_adapter(info.name) as adapter:
                    caps = await adapter.capabilities()
            except PandoRuntimeError as error:
                entry["problem"] = f"{error.code}: {error.message}"
                continue
            entry["capabilities"] = sorted(c.value for c in caps.supported)
    console.data(
        payload,
        lambda rows: (
            [["NAME", "API", "DESCRIPTION"]]
            + [[r["name"], r["api_version"], r["problem"] or r["description"]] for r in rows]
        ),
    )
    return EXIT_OK


async def _check(args: argparse.Namespace, console: Console) -> int:
    async with open_adapter(args, console) as adapter:
        await adapter.health_check()
        caps = await adapter.capabilities()
    console.data(
        {"adapter": adapter.kind, "healthy": True, "capabilities": unstructure(caps)},
        lambda d: [
            ["ADAPTER", "HEALTHY", "CAPABILITIES"],
            [d["adapter"], "yes", ", ".join(sorted(c.value for c in caps.supported))],
        ],
    )
    return EXIT_OK


async def _validate(args: argparse.Namespace, console: Console) -> int:
    plan = load_bundle_file(args.file)
    caps = None
    if args.against:
        async with open_adapter(args, console) as adapter:
            caps = await adapter.capabilities()
    problems = validate_plan(plan, caps)
    console.data(
        {
            "bundle_id": plan.bundle_id,
            "valid": not problems,
            "problems": [unstructure(p) for p in problems],
        },
        lambda d: (
            [["PATH", "PROBLEM"]]
            + ([[p["path"], p["message"]] for p in d["problems"]] or [["-", "valid"]])
        ),
    )
    return EXIT_INVALID if problems else EXIT_OK


def _progress(plan: BundlePlan, observed: ObservedBundle) -> AppProgress:
    running = {w.name for w in observed.workloads if w.running and not w.stopping}
    return AppProgress(
        bundle_id=plan.bundle_id,
        running=len(running),
        total=len(plan.workloads),
        waiting=tuple(w.name for w in plan.workloads if w.name not in running),
    )


def _settled(observed: ObservedBundle) -> bool:
    """Running, or past waiting for: a workload that ended will not become ready by itself."""
    return observed.all_running or any(w.exit_code is not None for w in observed.workloads)


async def _wait_running(
    adapter: RuntimeAdapter, plans: Sequence[BundlePlan], console: Console, patience: float
) -> list[ObservedBundle]:
    display = console.ready_display()
    started = anyio.current_time()
    observed = [await adapter.observe(BundleRef(p.bundle_id)) for p in plans]
    try:
        with anyio.move_on_after(patience) as waited:
            while True:
                if display is not None:
                    progress = [_progress(p, o) for p, o in zip(plans, observed, strict=True)]
                    display.update(progress, anyio.current_time() - started)
                if all(_settled(o) for o in observed):
                    break
                await anyio.sleep(1)
                observed = [await adapter.observe(BundleRef(p.bundle_id)) for p in plans]
    finally:
        if display is not None:
            display.finish()
    if waited.cancelled_caught:
        late = ", ".join(o.bundle_id for o in observed if not o.all_running)
        console.progress(f"not running after {patience:g}s: {late}")
    return observed


async def _apply(args: argparse.Namespace, console: Console) -> int:
    plans = [load_bundle_file(file) for file in args.files]
    async with open_adapter(args, console) as adapter:
        for plan in plans:
            handle = await adapter.apply(plan)
            console.progress(f"applied {handle.bundle_id}")
        observed = (
            await _wait_running(adapter, plans, console, args.timeout)
            if args.wait
            else [await adapter.observe(BundleRef(p.bundle_id)) for p in plans]
        )
    if len(observed) == 1:
        console.data(observed[0], _bundle_table)
    else:
        console.data(observed, lambda many: tables(many, _bundle_table))
    return EXIT_OK if all(o.all_running for o in observed) or not args.wait else EXIT_FAILED


async def _observe(args: argparse.Namespace, console: Console) -> int:
    async with open_adapter(args, console) as adapter:
        observed = await adapter.observe(BundleRef(args.app))
    console.data(observed, _bundle_table)
    return EXIT_OK if observed.exists else EXIT_NOT_FOUND


async def _watch(args: argparse.Namespace, console: Console) -> int:
    async with open_adapter(args, console) as adapter, adapter.watch_bundles() as events:
        count = 0
        async for event in events:
            if args.app and event.bundle_id not in (None, args.app):
                continue
            if console.json_output:
                print(json.dumps(unstructure(event)), file=console.out, flush=True)
            else:
                detail = "" if event.exit_code is None else f" exit={event.exit_code}"
                detail += "".join(f" {k}={v}" for k, v in event.details.items())
                print(
                    f"{event.at.isoformat()}  {event.kind.value:<14} {event.bundle_id or ''}"
                    f" {event.workload or ''}{detail}".rstrip(),
                    file=console.out,
                    flush=True,
                )
            count += 1
            if args.count and count >= args.count:
                break
    return EXIT_OK


async def _logs(args: argparse.Namespace, console: Console) -> int:
    options = LogOptions(follow=args.follow, tail=args.tail)
    async with (
        open_adapter(args, console) as adapter,
        adapter.logs(WorkloadRef(args.app, args.workload), options) as stream,
    ):
        async for chunk in stream:
            console.out.write(chunk.decode(errors="replace"))
            console.out.flush()
    return EXIT_OK


async def _exec(args: argparse.Namespace, console: Console) -> int:
    from ._exec import interactive_exec  # noqa: PLC0415 - terminals only matter here

    command = [c for c in args.command if c != "--"]
    if not command:
        raise InvalidInput("exec needs a command after --")
    ref = WorkloadRef(args.app, args.workload)
    async with open_adapter(args, console) as adapter:
        if sys.stdin.isatty() and not args.no_tty:
            return await interactive_exec(adapter, ref, tuple(command))
        stdin = None if sys.stdin.isatty() else sys.stdin.buffer.read()
        result = await adapter.run(ref, ExecRequest(command=tuple(command)), stdin=stdin)
    if console.json_output:
        console.data(result)
    else:
        sys.stdout.buffer.write(result.stdout)
        sys.stderr.buffer.write(result.stderr)
    return EXIT_FAILED if result.exit_code is None else result.exit_code


async def _stop(args: argparse.Namespace, console: Console) -> int:
    async with open_adapter(args, console) as adapter:
        await adapter.stop(BundleRef(args.app))
        console.data(await adapter.observe(BundleRef(args.app)), _bundle_table)
    return EXIT_OK


async def _destroy(args: argparse.Namespace, console: Console) -> int:
    async with open_adapter(args, console) as adapter:
        await adapter.destroy(BundleRef(args.app), DestroyOptions(keep_volumes=not args.volumes))
        observed = await adapter.observe(BundleRef(args.app))
        console.data(observed, _bundle_table)
    kept = [v.volume_id for v in observed.volumes if v.present]
    if kept:
        console.note(
            f"destroyed {args.app}; its volumes stay: {', '.join(kept)} "
            f"(pando-runtime destroy {args.app} --volumes removes them with their data)"
        )
    return EXIT_OK


async def _volume(args: argparse.Namespace, console: Console) -> int:
    async with open_adapter(args, console) as adapter:
        observed = await adapter.observe(BundleRef(args.app))
        try:
            handle = observed.volume(args.volume).handle
        except KeyError:
            handle = None
        if handle is None:
            raise NotFound(f"app {args.app!r} has no volume {args.volume!r}")
        if args.action == "snapshot":
            return await _snapshot(adapter, handle, args.file, console)
        source = (
            anyio.wrap_file(sys.stdin.buffer)
            if args.file == "-"
            else await anyio.open_file(args.file, "rb")
        )
        async with source:
            await adapter.restore_volume(handle, IteratorByteStream(_chunks(source)))
        console.progress(f"restored {args.volume} of {args.app}")
    return EXIT_OK


async def _chunks(source: anyio.AsyncFile[bytes]) -> AsyncIterator[bytes]:
    while chunk := await source.read(1 << 20):
        yield chunk


async def _snapshot(
    adapter: RuntimeAdapter, handle: VolumeHandle, file: str, console: Console
) -> int:
    size = 0
    target = (
        anyio.wrap_file(sys.stdout.buffer) if file == "-" else await anyio.open_file(file, "wb")
    )
    async with target, adapter.snapshot_volume(handle) as stream:
        async for chunk in stream:
            await target.write(chunk)
            size += len(chunk)
    console.progress(f"snapshot of {handle.volume_id}: {size} bytes")
    return EXIT_OK


async def _capacity(args: argparse.Namespace, console: Console) -> int:
    async with open_adapter(args, console) as adapter, adapter.read_scope():
        capacity = await adapter.capacity()
    fit = capacity.largest_fit
    console.data(
        capacity,
        lambda c: [
            ["CPU", "MEMORY", "RUNNING", "LARGEST FIT"],
            [
                cpu(c.total_cpu_millis),
                size(c.total_memory_bytes),
                str(c.running_workloads),
                f"{cpu(fit.cpu_millis)} / {size(fit.memory_bytes)}" if fit else "-",
            ],
        ],
    )
    return EXIT_OK


def _measured(value: int, unit: Callable[[int], str]) -> str:
    """A figure the runtime reported, or ``?`` when it could not tell (-1)."""
    return "?" if value < 0 else unit(value)


def _limit(value: int | None, unit: Callable[[int], str]) -> str:
    return "-" if value is None else unit(value)


def _usage_table(usage: BundleUsage) -> list[list[str]]:
    rows = [["WORKLOAD", "RUNNING", "CPU", "CPU LIMIT", "MEMORY", "MEMORY LIMIT"]]
    rows += [
        [
            w.workload,
            yes(w.running),
            _measured(w.cpu_millis, cpu),
            _limit(w.cpu_limit_millis, cpu),
            _measured(w.memory_bytes, size),
            _limit(w.memory_limit_bytes, size),
        ]
        for w in usage.workloads
    ]
    rows += [
        [f"volume {v.volume_id}", "", "", "", _measured(v.bytes, size), ""] for v in usage.volumes
    ]
    return rows


async def _usage(args: argparse.Namespace, console: Console) -> int:
    async with open_adapter(args, console) as adapter:
        if args.app is None:
            total = await adapter.in_use()
            console.data(
                total,
                lambda t: [["CPU", "MEMORY"], [cpu(t.cpu_millis), size(t.memory_bytes)]],
            )
            return EXIT_OK
        usage = await adapter.usage(BundleRef(args.app))
    console.data(usage, _usage_table)
    return EXIT_OK


async def _reset(args: argparse.Namespace, console: Console) -> int:
    name = adapter_name(args)
    if name != "fake":
        raise InvalidInput(
            f"reset clears the fake adapter's world; the {name} adapter keeps no state here"
        )
    configured = read_config(args).get(STATE_FILE, default_state_file())
    state = None if configured is None else Path(configured)
    removed = state is not None and state.exists()
    if removed and state is not None:
        state.unlink()
    console.data(
        {"state_file": None if state is None else str(state), "removed": removed},
        lambda d: [
            ["STATE FILE", "CLEARED"],
            [d["state_file"] or "(none: the world was kept in memory)", yes(d["removed"])],
        ],
    )
    return EXIT_OK


async def _catalog(args: argparse.Namespace, console: Console) -> int:
    from ._catalog import catalog_command  # noqa: PLC0415 - only this command pays for it

    return await catalog_command(args, console, lambda: open_adapter(args, console))


HANDLERS: dict[str, Handler] = {
    "adapters": _adapters,
    "check": _check,
    "validate": _validate,
    "apply": _apply,
    "observe": _observe,
    "watch": _watch,
    "logs": _logs,
    "exec": _exec,
    "stop": _stop,
    "destroy": _destroy,
    "volume": _volume,
    "capacity": _capacity,
    "usage": _usage,
    "reset": _reset,
    "catalog": _catalog,
}
"""The command line's commands, by name."""
