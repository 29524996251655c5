"""The packages' public names: each resolves, is documented, and a plain import stays light.

``pando_runtime`` (what a host uses), ``pando_runtime.plugin`` (what an adapter's author needs)
and ``pando_runtime.catalog`` each import a name's module on first use (their ``_EXPORTS``
tables); the type checkers' imports and ``__all__`` list the same names, which these tests
hold together, and no name is in two of them.
"""

from __future__ import annotations

import ast
import inspect
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from fresh_imports import modules_after

import pando_runtime as pr
from pando_runtime import catalog, plugin

NAMESPACES = {"pando_runtime": pr, "pando_runtime.plugin": plugin, "pando_runtime.catalog": catalog}


def _type_checking_imports(namespace: ModuleType) -> dict[str, str]:
    """Name -> module of the ``from ._x import y`` lines under ``if TYPE_CHECKING:``."""
    tree = ast.parse(Path(str(namespace.__file__)).read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                if statement.level == 0 or statement.module is None:  # typing, submodules
                    continue
                for alias in statement.names:
                    found[alias.asname or alias.name] = str(statement.module)
    return found


def _table(namespace: ModuleType) -> dict[str, str]:
    exports: dict[str, tuple[str, ...]] = namespace._EXPORTS
    assert all(isinstance(names, tuple) for names in exports.values()), "tuples of names"
    return {name: module for module, names in exports.items() for name in names}


@pytest.mark.parametrize("namespace", NAMESPACES.values(), ids=list(NAMESPACES))
def test_the_table_the_type_checkers_imports_and_all_list_the_same_names(
    namespace: ModuleType,
) -> None:
    table = _table(namespace)
    imports = _type_checking_imports(namespace)
    assert imports == table, {
        "only in _EXPORTS": sorted(table.keys() - imports.keys()),
        "only in the TYPE_CHECKING imports": sorted(imports.keys() - table.keys()),
        "in another module": sorted(
            n for n in table.keys() & imports.keys() if table[n] != imports[n]
        ),
    }
    assert sorted(namespace.__all__) == sorted(table), set(namespace.__all__) ^ set(table)
    assert len(namespace.__all__) == len(set(namespace.__all__)), "no name listed twice"


def test_each_name_has_one_home() -> None:
    seen: dict[str, str] = {}
    for label, namespace in NAMESPACES.items():
        for name in namespace.__all__:
            assert name not in seen, f"{name} is in {seen.get(name)} and {label}"
            seen[name] = label


@pytest.mark.parametrize(
    ("label", "name"),
    [(label, name) for label, ns in NAMESPACES.items() for name in ns.__all__],
)
def test_every_public_name_resolves_to_its_modules_object_and_is_documented(
    label: str, name: str
) -> None:
    namespace = NAMESPACES[label]
    module = _table(namespace)[name]
    value = getattr(namespace, name)
    assert value is getattr(sys.modules[f"pando_runtime.{module}"], name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"{name} has a docstring"
        assert value.__module__ == f"pando_runtime.{module}", "defined where the table says"


@pytest.mark.parametrize(("name", "home"), sorted(pr._MOVED.items()))
def test_names_that_moved_resolve_where_they_were_with_a_warning_naming_the_new_home(
    name: str, home: str
) -> None:
    with pytest.warns(
        DeprecationWarning, match=rf"pando_runtime\.{name} is {home}\.{name} now"
    ) as warned:
        value = getattr(pr, name)
    assert warned[0].filename == __file__, "the warning points at the line that named it"
    assert value is getattr(NAMESPACES[home], name)
    assert name not in pr.__all__


def test_the_public_submodules_are_attributes_of_the_package() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pr.catalog is catalog
        assert pr.plugin is plugin
        assert pr.catalog.CatalogSyncer is catalog.CatalogSyncer
    assert {"catalog", "plugin", "testing", "blocking"} <= set(dir(pr))


def test_unknown_names_are_attribute_errors_and_dir_lists_the_public_names() -> None:
    with pytest.raises(AttributeError, match="no attribute 'BundlePlam'"):
        _ = pr.BundlePlam  # type: ignore[attr-defined]
    assert set(pr.__all__) <= set(dir(pr))


def test_a_plain_import_imports_no_submodule_nor_cattrs_or_yaml() -> None:
    loaded = modules_after("import pando_runtime")
    assert not {m for m in loaded if m.startswith("pando_runtime.")} - {"pando_runtime._lazy"}, (
        "names load on first use"
    )
    assert not {m for m in loaded if m.split(".")[0] in {"cattrs", "yaml", "attrs", "anyio"}}


def test_the_contract_types_import_without_cattrs_or_yaml() -> None:
    loaded = modules_after(
        "import pando_runtime as pr\n"
        "pr.RuntimeAdapter, pr.BundlePlan, pr.ObservedBundle, pr.AdapterInfo, pr.validate_plan"
    )
    assert "pando_runtime._adapter" in loaded
    assert "cattrs" not in loaded
    assert "yaml" not in loaded


def test_conversion_imports_cattrs_on_first_use() -> None:
    loaded = modules_after("import pando_runtime as pr\npr.structure({'port': 80}, dict)")
    assert "cattrs" in loaded


def test_the_command_lines_help_imports_no_runtime_code() -> None:
    loaded = modules_after(
        "import contextlib, io\n"
        "from pando_runtime._cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])"
    )
    assert "pando_runtime._cli._commands" not in loaded
    assert not {m for m in loaded if m.split(".")[0] in {"cattrs", "yaml", "attrs", "anyio"}}


@pytest.mark.parametrize(("old", "new"), [("Protocol", "PortProtocol"), ("converter", None)])
def test_old_names_resolve_with_a_deprecation_warning_and_are_in_no_list(
    old: str, new: str | None
) -> None:
    with pytest.warns(DeprecationWarning, match=f"pando_runtime.{old} ") as warned:
        value = getattr(pr, old)
    assert warned[0].filename == __file__, "the warning points at the line that named it"
    if new is not None:
        assert value is getattr(pr, new)
    assert old not in pr.__all__
    assert old not in _table(pr)
