"""The package's public names: each resolves, is documented, and a plain import stays light.

``pando_runtime`` imports each name's module on first use (its ``_EXPORTS`` table); the
type checkers' imports and ``__all__`` list the same names, which these tests hold together.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import pando_runtime as pr

INIT = Path(pr.__file__)


def _type_checking_imports() -> dict[str, str]:
    """Name -> module of the ``from ._x import y`` lines under ``if TYPE_CHECKING:``."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                if statement.level == 0:  # typing helpers, not exports
                    continue
                for alias in statement.names:
                    found[alias.asname or alias.name] = str(statement.module)
    return found


def test_the_table_the_type_checkers_imports_and_all_list_the_same_names() -> None:
    table = {name: module for module, names in pr._EXPORTS.items() for name in names}
    assert all(isinstance(names, tuple) for names in pr._EXPORTS.values()), "tuples of names"
    imports = _type_checking_imports()
    assert imports == table, {
        "only in _EXPORTS": sorted(table.keys() - imports.keys()),
        "only in the TYPE_CHECKING imports": sorted(imports.keys() - table.keys()),
        "in another module": sorted(
            n for n in table.keys() & imports.keys() if table[n] != imports[n]
        ),
    }
    assert sorted(pr.__all__) == sorted(table), set(pr.__all__) ^ set(table)
    assert len(pr.__all__) == len(set(pr.__all__)), "no name listed twice"


@pytest.mark.parametrize("name", pr.__all__)
def test_every_public_name_resolves_to_its_modules_object_and_is_documented(name: str) -> None:
    module = next(m for m, names in pr._EXPORTS.items() if name in names)
    value = getattr(pr, name)
    assert value is getattr(sys.modules[f"pando_runtime.{module}"], name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"{name} has a docstring"
        assert value.__module__ == f"pando_runtime.{module}", "defined where the table says"


def test_unknown_names_are_attribute_errors_and_dir_lists_the_public_names() -> None:
    with pytest.raises(AttributeError, match="no attribute 'BundlePlam'"):
        _ = pr.BundlePlam  # type: ignore[attr-defined]
    assert set(pr.__all__) <= set(dir(pr))


def _modules_after(code: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(result.stdout.split())


def test_a_plain_import_imports_no_submodule_nor_cattrs_or_yaml() -> None:
    loaded = _modules_after("import pando_runtime")
    assert not {m for m in loaded if m.startswith("pando_runtime.")}, "names load on first use"
    assert not {m for m in loaded if m.split(".")[0] in {"cattrs", "yaml", "attrs", "anyio"}}


def test_the_contract_types_import_without_cattrs_or_yaml() -> None:
    loaded = _modules_after(
        "import pando_runtime as pr\n"
        "pr.RuntimeAdapter, pr.BundlePlan, pr.ObservedBundle, pr.AdapterInfo, pr.validate_plan"
    )
    assert "pando_runtime._adapter" in loaded
    assert "cattrs" not in loaded
    assert "yaml" not in loaded


def test_conversion_imports_cattrs_on_first_use() -> None:
    loaded = _modules_after("import pando_runtime as pr\npr.structure({'port': 80}, dict)")
    assert "cattrs" in loaded


def test_the_command_lines_help_imports_no_runtime_code() -> None:
    loaded = _modules_after(
        "import contextlib, io\n"
        "from pando_runtime._cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])"
    )
    assert "pando_runtime._cli_commands" not in loaded
    assert not {m for m in loaded if m.split(".")[0] in {"cattrs", "yaml", "attrs", "anyio"}}


@pytest.mark.parametrize(("old", "new"), [("Protocol", "PortProtocol"), ("converter", None)])
def test_old_names_resolve_with_a_deprecation_warning_and_are_in_no_list(
    old: str, new: str | None
) -> None:
    with pytest.warns(DeprecationWarning, match=f"pando_runtime.{old} "):
        value = getattr(pr, old)
    if new is not None:
        assert value is getattr(pr, new)
    assert old not in pr.__all__
    assert old not in {n for names in pr._EXPORTS.values() for n in names}
