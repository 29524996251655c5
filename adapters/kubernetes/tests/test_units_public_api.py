"""The Kubernetes distribution's public names: listed alike everywhere, each resolving, light.

``pando_runtime_kubernetes`` imports the client-heavy modules on first use (its ``_LAZY``
table); the type checkers' imports, the eager imports and ``__all__`` list the same names.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pando_runtime_kubernetes as pk
import pytest

INIT = Path(pk.__file__)


def _imports(*, type_checking: bool) -> dict[str, str]:
    """Name -> module of the package's relative imports (eager, or under TYPE_CHECKING)."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            statements = node.body if type_checking else []
        elif isinstance(node, ast.ImportFrom) and not type_checking:
            statements = [node]
        else:
            continue
        for statement in statements:
            assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
            if statement.level == 0:
                continue
            for alias in statement.names:
                found[alias.asname or alias.name] = "." + str(statement.module)
    return found


def test_the_lazy_table_the_imports_and_all_list_the_same_names() -> None:
    lazy = _imports(type_checking=True)
    assert lazy == pk._LAZY, {
        "only in _LAZY": sorted(pk._LAZY.keys() - lazy.keys()),
        "only under TYPE_CHECKING": sorted(lazy.keys() - pk._LAZY.keys()),
        "in another module": sorted(
            n for n in lazy.keys() & pk._LAZY.keys() if lazy[n] != pk._LAZY[n]
        ),
    }
    eager = _imports(type_checking=False)
    assert not eager.keys() & lazy.keys(), "a name is either eager or lazy"
    assert sorted(pk.__all__) == sorted(eager.keys() | lazy.keys())
    assert len(pk.__all__) == len(set(pk.__all__)), "no name listed twice"


@pytest.mark.parametrize("name", pk.__all__)
def test_every_public_name_resolves_and_is_documented(name: str) -> None:
    value = getattr(pk, name)
    module = pk._LAZY.get(name)
    if module is not None:
        assert value is getattr(sys.modules[f"pando_runtime_kubernetes{module}"], name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"{name} has a docstring"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'KubernetesAdaptor'"):
        _ = pk.KubernetesAdaptor  # type: ignore[attr-defined]


def test_a_plain_import_does_not_import_the_kubernetes_client() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pando_runtime_kubernetes, sys; print(' '.join(sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "kubernetes" not in result.stdout.split()
    assert "pando_runtime_kubernetes.api._transport" not in result.stdout.split()


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
