"""``pando-runtime catalog``: keep a service catalog equal to what runs, or clean it.

``catalog sync`` runs a :class:`CatalogSyncer` over the backend ``--catalog`` names, fed by
a source: ``bundles`` (the bundle files' apps on the configured adapter) or a source plugin
of the entry-point group ``pando_runtime.catalog_sources`` (``kubernetes``: a cluster's
Services). It prints a line per change and a summary when it ends (interrupted, or with
``--once`` when the first whole set is written). With ``--replica NAME`` it joins the
adapter's membership and writes only while that replica holds the catalog singleton, so
several processes can run it for availability (``docs/replicas.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio

from .._contract._errors import InvalidInput, PandoRuntimeError, Problem
from .._input._convert import load_bundle_file, unstructure
from .._plugins._kinds import import_attr, plugin_targets
from .._replicas._settings import MembershipSettings
from ..catalog._bundles import BundleSource
from ..catalog._registry import available_catalogs, load_catalog
from ..catalog._sync import CatalogSyncer, SyncChange
from ..catalog._types import CATALOG_NODE, CatalogBackend, Syncer

__all__ = ["SOURCE_ENTRY_POINT_GROUP", "catalog_command"]

SOURCE_ENTRY_POINT_GROUP = "pando_runtime.catalog_sources"
"""Source plugins: ``name = "module:attr"``, a callable ``(settings, syncer)`` returning an
async context manager that publishes to the syncer while it is entered."""

SourceFactory = Callable[[Mapping[str, Any], Syncer], AbstractAsyncContextManager[Any]]


def _settings(path: str | None, items: list[str] | None, flag: str) -> dict[str, Any]:
    """Settings from a YAML/JSON file and ``KEY=VALUE`` items (values read as YAML)."""
    import yaml  # noqa: PLC0415 - only the CLI reads settings files

    settings: dict[str, Any] = {}
    if path:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise InvalidInput(f"settings file {path} must hold a mapping")
        settings.update(loaded)
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidInput(
                f"{flag} takes key=value", [Problem(flag, f"got {item!r}", "invalid")]
            )
        settings[key] = yaml.safe_load(value)
    return settings


def _backend(args: argparse.Namespace) -> CatalogBackend:
    name = args.catalog or os.environ.get("PANDO_RUNTIME_CATALOG") or "consul"
    return load_catalog(name, _settings(args.catalog_config, args.catalog_set, "--catalog-set"))


def _source_factory(name: str) -> SourceFactory:
    targets = plugin_targets(SOURCE_ENTRY_POINT_GROUP, {}, {})
    if name not in targets:
        known = ", ".join(["bundles", *sorted(targets)])
        raise InvalidInput(
            f"no catalog source is named {name!r}; installed: {known}",
            [Problem("--source", f"unknown source {name!r}", "invalid")],
        )
    factory: SourceFactory = import_attr(targets[name])
    return factory


class _Report:
    """Prints a line per change and counts them for the summary."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.counts: Counter[str] = Counter()

    def change(self, change: SyncChange) -> None:
        self.counts[change.kind.value] += 1
        if self.console.json_output:
            line = json.dumps({"change": unstructure(change)}, default=str)
        else:
            line = str(change)
        print(line, file=self.console.out, flush=True)


def _bundle_plans(args: argparse.Namespace) -> list[Any]:
    plans = [load_bundle_file(file) for file in args.files]
    if not plans:
        raise InvalidInput(
            "the bundles source publishes the apps of bundle files: name at least one",
            [Problem("files", "no bundle file given", "required")],
        )
    return plans


@contextlib.asynccontextmanager
async def _bundles(
    plans: list[Any], args: argparse.Namespace, syncer: CatalogSyncer, adapter: Any
) -> AsyncIterator[BundleSource]:
    source = BundleSource(adapter, syncer, node=args.node[0] if args.node else CATALOG_NODE)
    for plan in plans:
        source.track(plan)
    async with source.running():
        yield source


def _check_replica(args: argparse.Namespace) -> MembershipSettings | None:
    """The membership settings of ``--replica``; refuses what would undo the holder's work."""
    if args.replica is None:
        return None
    problems = []
    if args.action == "cleanup":
        problems.append(
            Problem("--replica", "cleanup removes what the singleton's holder writes", "conflict")
        )
    if args.cleanup_on_exit:
        problems.append(
            Problem(
                "--cleanup-on-exit",
                "a replica leaving would remove what its successor keeps",
                "conflict",
            )
        )
    if problems:
        raise InvalidInput(
            "a replica syncs under the singleton; it does not clean up",
            problems,
            remedy="Run catalog cleanup without --replica once every replica has stopped.",
        )
    return MembershipSettings(
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )


async def _check(backend: CatalogBackend) -> None:
    """Report an unreachable catalog before anything starts (when the backend can tell)."""
    check = getattr(backend, "check", None)
    if check is not None:
        await check()


async def _until_stopped(syncer: CatalogSyncer, once: bool) -> None:
    if once:
        await syncer.wait_desired_known()
        await syncer.wait_applied()
        return
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for error in group.exceptions:
        out.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return out


async def catalog_command(
    args: argparse.Namespace, console: Any, open_adapter: Callable[[], Any]
) -> int:
    """Run ``catalog list|sync|cleanup``; returns the exit code."""
    try:
        return await _catalog_command(args, console, open_adapter)
    except BaseExceptionGroup as group:
        # Errors leave the sources' task groups wrapped: the command line reports the one.
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], PandoRuntimeError):
            raise leaves[0] from None
        raise


async def _catalog_command(
    args: argparse.Namespace, console: Any, open_adapter: Callable[[], Any]
) -> int:
    if args.action == "list":
        infos = available_catalogs()
        console.data(
            infos,
            lambda rows: [
                ["CATALOG", "DESCRIPTION", "PROBLEM"],
                *([i.name, i.description, i.problem or ""] for i in rows),
            ],
        )
        return 0
    membership_settings = _check_replica(args)
    source_settings = _settings(args.source_config, args.source_set, "--source-set")
    factory = None if args.source == "bundles" else _source_factory(args.source)
    backend = _backend(args)
    report = _Report(console)
    nodes = tuple(args.node or ()) or (CATALOG_NODE,)
    syncer = CatalogSyncer(
        backend,
        owner=args.owner,
        resync_interval=args.resync,
        reap_interval=args.reap,
        nodes=nodes,
        on_change=report.change,
        writer=args.replica,
    )

    def holding(held: bool) -> None:
        state = "holds" if held else "lost"
        console.progress(f"replica {args.replica} {state} singleton {args.singleton}")

    try:
        if args.action == "cleanup":
            await _check(backend)
            removed = await syncer.cleanup()
            console.data({"removed": removed}, lambda d: [["REMOVED"], [str(d["removed"])]])
            return 0
        plans = _bundle_plans(args) if factory is None else []
        async with contextlib.AsyncExitStack() as stack:
            adapter: Any = None
            if factory is None or membership_settings is not None:
                adapter = await stack.enter_async_context(open_adapter())
            source: AbstractAsyncContextManager[Any] = (
                _bundles(plans, args, syncer, adapter)
                if factory is None
                else factory(source_settings, syncer)
            )
            # The source first: its settings are checked before the catalog is touched, and
            # what it hands over waits in the syncer, which writes nothing before its loop runs.
            await stack.enter_async_context(source)
            membership = None
            if membership_settings is not None:
                membership = await stack.enter_async_context(
                    adapter.membership(args.replica, membership_settings)
                )
            await _check(backend)
            async with syncer.running(membership, singleton=args.singleton, on_hold=holding):
                console.progress(f"syncing to {args.catalog or 'consul'} (Ctrl-C stops)")
                await _until_stopped(syncer, args.once)
            if args.cleanup_on_exit:
                await syncer.cleanup()
    finally:
        await backend.aclose()
    status = syncer.status
    summary = {
        "desired": status.desired,
        "owned": status.owned,
        "changes": dict(report.counts),
        "calls": dict(status.calls),
        "healthy": status.healthy,
        "last_error": status.last_error,
    }
    console.data(
        summary,
        lambda s: [
            ["DESIRED", "OWNED", "CHANGES", "CALLS", "LAST ERROR"],
            [
                str(s["desired"]),
                str(s["owned"]),
                " ".join(f"{k}={v}" for k, v in sorted(s["changes"].items())) or "-",
                " ".join(f"{k}={v}" for k, v in sorted(s["calls"].items())) or "-",
                s["last_error"] or "-",
            ],
        ],
    )
    return 0
