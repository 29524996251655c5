"""The command line's console: tables for people, JSON for scripts, and the exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from .._contract._errors import (
    AdapterUnavailable,
    CapabilityUnsupported,
    CatalogUnavailable,
    InvalidInput,
    NotFound,
    PandoRuntimeError,
)
from .._input._convert import unstructure
from ._progress import ReadyDisplay

__all__ = [
    "EXIT_FAILED",
    "EXIT_INVALID",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_UNSUPPORTED",
    "Console",
    "exit_code",
    "tables",
    "yes",
]

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_UNAVAILABLE, EXIT_NOT_FOUND, EXIT_UNSUPPORTED = range(6)


class Console:
    """Where output goes: tables for people, JSON for scripts; progress on stderr."""

    def __init__(self, json_output: bool, out: TextIO, err: TextIO) -> None:
        self.json_output = json_output
        self.out = out
        self.err = err

    def data(self, value: Any, table: Callable[[Any], list[list[str]]] | None = None) -> None:
        """Print ``value``: as JSON, or as a table when one is given and JSON is not wanted."""
        if self.json_output or table is None:
            print(json.dumps(unstructure(value), indent=2, default=str), file=self.out)
            return
        rows = table(value)
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip(),
                file=self.out,
            )

    def progress(self, message: str) -> None:
        """A progress line for people (never in JSON output)."""
        if not self.json_output:
            print(message, file=self.err, flush=True)

    def ready_display(self) -> ReadyDisplay | None:
        """The display of apps becoming ready, on stderr; none for JSON output."""
        return None if self.json_output else ReadyDisplay(self.err)

    def note(self, message: str) -> None:
        """Something the user should know once, on stderr whatever the output format."""
        print(f"note: {message}", file=self.err, flush=True)


def yes(value: bool | None) -> str:
    """``yes``, ``no`` or ``-`` (not known), for a table's cell."""
    return {True: "yes", False: "no", None: "-"}[value]


def tables(values: Sequence[Any], table: Callable[[Any], list[list[str]]]) -> list[list[str]]:
    """Several tables as one, with a blank row between them."""
    rows: list[list[str]] = []
    for value in values:
        part = table(value)
        if rows:
            rows.append([""] * len(part[0]))
        rows += part
    return rows


def exit_code(error: PandoRuntimeError) -> int:
    """The exit code a command ends with when it raised ``error``."""
    for kind, code in (
        (InvalidInput, EXIT_INVALID),
        (AdapterUnavailable, EXIT_UNAVAILABLE),
        (CatalogUnavailable, EXIT_UNAVAILABLE),
        (NotFound, EXIT_NOT_FOUND),
        (CapabilityUnsupported, EXIT_UNSUPPORTED),
    ):
        if isinstance(error, kind):
            return code
    return EXIT_FAILED
