"""The docs' examples run, and every error code is documented.

Fenced blocks marked ``python`` in ``docs/*.md`` are executed (each page's blocks in order, in one
namespace); blocks marked ``py`` are illustrations and are not.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import pando_runtime as pr

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


@pytest.mark.parametrize(
    "page", [p for p in PAGES if BLOCK.search(p.read_text())], ids=lambda p: p.name
)
def test_examples_in_docs_run(page: Path) -> None:
    code = "\n\n".join(BLOCK.findall(page.read_text(encoding="utf-8")))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def _error_classes() -> list[type[pr.PandoRuntimeError]]:
    found = []
    for name in pr.__all__:
        value = getattr(pr, name)
        if isinstance(value, type) and issubclass(value, pr.PandoRuntimeError):
            found.append(value)
    return found


def test_every_error_code_is_documented_and_unique() -> None:
    table = (DOCS / "errors.md").read_text(encoding="utf-8")
    codes = [cls.code for cls in _error_classes()]
    assert len(codes) == len(set(codes)), "codes are unique"
    for cls in _error_classes():
        assert f"| `{cls.code}` | `{cls.__name__}` |" in table, cls.__name__


def test_errors_carry_code_message_remedy_and_details() -> None:
    error = pr.RateLimited("registry said 429", retry_after=2.5)
    assert error.to_dict() == {
        "code": "RATE_LIMITED",
        "message": "registry said 429",
        "remedy": pr.RateLimited.default_remedy,
        "details": {"retry_after": 2.5},
    }
    assert "[RATE_LIMITED]" in str(error)
    assert isinstance(pr.CapabilityUnsupported("exec"), NotImplementedError)
    assert isinstance(pr.NotFound("x"), LookupError)
    assert isinstance(pr.InvalidConfig("x"), ValueError)
