"""The command line's dispatch: the parsed command run, its errors printed, its exit code."""

from __future__ import annotations

import argparse
import json
import sys

import anyio

from .._contract._errors import PandoRuntimeError
from ._commands import HANDLERS
from ._console import EXIT_INVALID, Console, exit_code

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; returns the exit code."""
    console = Console(args.output == "json", sys.stdout, sys.stderr)
    handler = HANDLERS[args.handler]
    try:
        return anyio.run(handler, args, console)
    except PandoRuntimeError as error:
        if console.json_output:
            print(json.dumps({"error": error.to_dict()}, default=str), file=sys.stdout)
        else:
            print(f"error [{error.code}]: {error.message}", file=sys.stderr)
            print(f"remedy: {error.remedy}", file=sys.stderr)
        return exit_code(error)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
