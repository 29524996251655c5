"""No module of the core or of an adapter grows past 600 lines without saying why.

A long module usually holds several jobs; split it by job. When one job really is that long,
its module docstring says so in a line that starts with ``Long because`` (see the core's map,
``docs/core-layers.md``), and this test lets it be.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 600
MARKER = "Long because"


def _modules() -> list[Path]:
    """The core's modules and every adapter's package modules."""
    found = sorted((ROOT / "pando_runtime").rglob("*.py"))
    found += sorted(ROOT.glob("adapters/*/pando_runtime_*/**/*.py"))
    return found


def _gives_a_reason(source: str) -> bool:
    docstring = ast.get_docstring(ast.parse(source)) or ""
    return any(line.strip().startswith(MARKER) for line in docstring.splitlines())


def test_the_modules_are_found() -> None:
    names = {path.relative_to(ROOT).parts[0] for path in _modules()}
    assert names == {"pando_runtime", "adapters"}
    assert any("pando_runtime_kubernetes" in path.parts for path in _modules())


def test_no_long_module_without_a_reason() -> None:
    long_without_reason = []
    for path in _modules():
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > LIMIT and not _gives_a_reason(source):
            long_without_reason.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not long_without_reason, (
        f"over {LIMIT} lines with no line starting with {MARKER!r} in the module docstring "
        f"(split them by job, or say why not): {', '.join(long_without_reason)}"
    )


@pytest.mark.parametrize(
    ("docstring", "expected"),
    [
        ('"""One job.\n\nLong because one state machine.\n"""\n', True),
        ('"""One job.\n\nIt is not Long because of anything.\n"""\n', False),
        ("x = 1\n", False),
    ],
)
def test_the_reason_is_read_from_the_module_docstring(docstring: str, expected: bool) -> None:
    assert _gives_a_reason(docstring) is expected
