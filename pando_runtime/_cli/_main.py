"""``pando-runtime``: an operator's command line over any adapter.

The adapter comes from ``--adapter`` (or ``PANDO_RUNTIME_ADAPTER``, default
``fake``); its settings from ``--config FILE`` (YAML or JSON, or
``PANDO_RUNTIME_CONFIG``) and ``--set key=value`` (values read as YAML
scalars). Output is a table for people, or ``--output json`` for scripts.

On the fake adapter the world persists between commands in a per-user state
file, ``$XDG_STATE_HOME/pando-runtime/fake.json`` (``~/.local/state/...`` by
default); ``--set state_file=PATH`` picks another (empty: keep nothing) and
``pando-runtime reset`` clears it.

Exit codes: 0 done; 1 the runtime failed; 2 invalid input; 3 runtime
unavailable; 4 not found; 5 capability unsupported.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence

__all__ = ["main"]

_RST_LITERAL = re.compile(r"``([^`]+)``")


def _plain(paragraph: str) -> str:
    """A docstring paragraph as terminal text: no reStructuredText literal markup."""
    return _RST_LITERAL.sub(r"\1", paragraph)


def _parser() -> argparse.ArgumentParser:
    paragraphs = __doc__.split("\n\n")
    parser = argparse.ArgumentParser(
        prog="pando-runtime",
        description=_plain(paragraphs[0]),
        epilog=_plain(paragraphs[-1]),  # the exit codes
    )
    parser.add_argument("--adapter", help="adapter name (env PANDO_RUNTIME_ADAPTER; default fake)")
    parser.add_argument(
        "--config", help="adapter settings file, YAML or JSON (env PANDO_RUNTIME_CONFIG)"
    )
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="one setting")
    parser.add_argument("--output", choices=("table", "json"), default="table")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=name)  # by name: the handlers' module is imported after parsing
        return sub

    command("adapters", "list installed adapters").add_argument(
        "--capabilities", action="store_true", help="load each and show its capabilities"
    )
    command("check", "health and capabilities of the configured adapter")
    validate = command("validate", "check a bundle file: every problem with its path")
    validate.add_argument("file")
    validate.add_argument(
        "--against", action="store_true", help="also check it against the adapter's capabilities"
    )
    apply = command("apply", "apply bundle files and wait until their apps run")
    apply.add_argument("files", nargs="+", metavar="file")
    apply.add_argument("--no-wait", dest="wait", action="store_false")
    apply.add_argument("--timeout", type=float, default=300.0)
    command("observe", "show an app's state").add_argument("app")
    watch = command("watch", "print events as they come")
    watch.add_argument("app", nargs="?")
    watch.add_argument("--count", type=int, default=0, help="stop after N events")
    logs = command("logs", "print a workload's log")
    logs.add_argument("app")
    logs.add_argument("workload")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--tail", type=int)
    execute = command("exec", "run a command in a workload: exec APP WORKLOAD -- CMD")
    execute.add_argument("app")
    execute.add_argument("workload")
    execute.add_argument("--no-tty", action="store_true")
    execute.add_argument("command", nargs=argparse.REMAINDER)
    command("stop", "stop an app's workloads; keep the rest").add_argument("app")
    destroy = command("destroy", "remove an app (volumes kept unless --volumes)")
    destroy.add_argument("app")
    destroy.add_argument("--volumes", action="store_true", help="also destroy its volumes")
    volume = command("volume", "snapshot or restore an app's volume as tar")
    volume.add_argument("action", choices=("snapshot", "restore"))
    volume.add_argument("app")
    volume.add_argument("volume")
    volume.add_argument("file", help="tar file, or - for stdout/stdin")
    command("capacity", "what the runtime can give")
    usage = command("usage", "what an app uses now (all apps, summed, without APP)")
    usage.add_argument("app", nargs="?")
    command("reset", "forget the fake adapter's world (its state file)")
    _catalog_parser(command("catalog", "keep a service catalog equal to what runs, or clean it"))
    return parser


def _catalog_parser(catalog: argparse.ArgumentParser) -> None:
    catalog.add_argument(
        "action",
        choices=("sync", "cleanup", "list"),
        help="sync: until interrupted; cleanup: remove what the syncer owns; list: backends",
    )
    catalog.add_argument("files", nargs="*", metavar="file", help="bundle files (source bundles)")
    catalog.add_argument("--catalog", help="catalog backend (env PANDO_RUNTIME_CATALOG; consul)")
    catalog.add_argument("--catalog-config", help="backend settings file, YAML or JSON")
    catalog.add_argument("--catalog-set", action="append", metavar="KEY=VALUE")
    catalog.add_argument(
        "--source",
        default="bundles",
        help="bundles (the files' apps on --adapter) or a source plugin: kubernetes",
    )
    catalog.add_argument("--source-config", help="source settings file, YAML or JSON")
    catalog.add_argument("--source-set", action="append", metavar="KEY=VALUE")
    catalog.add_argument(
        "--node", action="append", help="catalog node(s) to read and clean (repeat)"
    )
    catalog.add_argument("--owner", default="pando-runtime", help="the owner tag")
    catalog.add_argument("--resync", type=float, default=5.0, help="seconds between full passes")
    catalog.add_argument("--reap", type=float, default=10.0, help="seconds between reaps")
    catalog.add_argument(
        "--once", action="store_true", help="stop once the first whole set is written"
    )
    catalog.add_argument(
        "--cleanup-on-exit", action="store_true", help="remove what it owns when it stops"
    )
    replicas = catalog.add_argument_group(
        "replicas", "sync as one of several replicas: only the singleton's holder writes"
    )
    replicas.add_argument(
        "--replica",
        help="join the adapter's membership as NAME; write while holding the singleton",
    )
    replicas.add_argument(
        "--singleton", default="catalog-sync", help="the singleton's name (catalog-sync)"
    )
    replicas.add_argument("--lease-duration", type=float, default=15.0, help="seconds (15)")
    replicas.add_argument("--renew-deadline", type=float, default=10.0, help="seconds (10)")
    replicas.add_argument("--retry-period", type=float, default=2.0, help="seconds (2)")


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer a shell's completion request (argcomplete, when installed), then exit."""
    try:
        import argcomplete  # noqa: PLC0415 - only a completing shell pays for it
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    if "_ARGCOMPLETE" in os.environ:
        _complete(parser)
    args = parser.parse_args(argv)
    # Imported after parsing, so that --help and usage errors import no runtime code.
    from ._run import run  # noqa: PLC0415

    return run(args)
