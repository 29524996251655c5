"""The Kubernetes distribution's public names: listed alike everywhere, each resolving, light.

``pando_runtime_kubernetes`` imports each name's module on the name's first use (its
``_EXPORTS`` table, read by the core's ``lazy_attributes``); the type checkers' imports, the
table and ``__all__`` list the same names.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pando_runtime_kubernetes as pk
import pytest
from fresh_imports import modules_after

INIT = Path(pk.__file__)


def _type_checking_imports() -> dict[str, str]:
    """Name -> module of the package's relative imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                for alias in statement.names:
                    found[alias.asname or alias.name] = str(statement.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            pytest.fail(f"an eager import of the package's own: {ast.unparse(node)}")
    return found


def _table() -> dict[str, str]:
    return {name: module for module, names in pk._EXPORTS.items() for name in names}


def test_the_table_the_type_checkers_imports_and_all_list_the_same_names() -> None:
    table, imports = _table(), _type_checking_imports()
    assert imports == table, {
        "only in _EXPORTS": sorted(table.keys() - imports.keys()),
        "only under TYPE_CHECKING": sorted(imports.keys() - table.keys()),
        "in another module": sorted(
            n for n in table.keys() & imports.keys() if table[n] != imports[n]
        ),
    }
    assert sorted(pk.__all__) == sorted(table)
    assert len(pk.__all__) == len(set(pk.__all__)), "no name listed twice"
    assert set(pk.__all__) <= set(dir(pk))


@pytest.mark.parametrize("name", pk.__all__)
def test_every_public_name_resolves_and_is_documented(name: str) -> None:
    value = getattr(pk, name)
    assert value is getattr(sys.modules[f"pando_runtime_kubernetes.{_table()[name]}"], name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"{name} has a docstring"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'KubernetesAdaptor'"):
        _ = pk.KubernetesAdaptor  # type: ignore[attr-defined]


def test_a_plain_import_imports_none_of_the_packages_modules_nor_the_client() -> None:
    loaded = modules_after("import pando_runtime_kubernetes")
    assert "kubernetes" not in loaded
    assert not [m for m in loaded if m.startswith("pando_runtime_kubernetes.")], "on first use"


def test_the_transports_counts_are_read_only_and_snapshotted_together() -> None:
    from kubernetes.client import Configuration  # noqa: PLC0415

    transport = pk.KubeTransport(Configuration())
    try:
        with pytest.raises(AttributeError):
            transport.calls = 5  # type: ignore[misc]
        stats = transport.stats()
        assert stats == pk.TransportStats(
            calls=0,
            calls_by_kind={},
            probes=0,
            retries=0,
            bytes_received=0,
            in_flight=0,
            open_watches={},
        )
        assert transport.calls_by_kind is not transport.calls_by_kind, "a copy each time"
    finally:
        transport.close()
