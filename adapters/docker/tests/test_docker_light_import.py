"""The Docker distribution's public names: listed alike everywhere, each resolving, light.

``pando_runtime_docker`` imports each name's module on the name's first use (its ``_EXPORTS``
table, read by the core's ``lazy_attributes``): a plain import, listing adapters or reading the
settings imports no HTTP stack. The adapter itself imports httpx, which its first call needs
(the Engine API is HTTP over its socket, exec and attach included), so nothing heavier is
left to defer there.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pando_runtime_docker as pd
import pytest
from fresh_imports import modules_after

HTTP_ROOTS = frozenset({"httpx", "httpcore", "h11", "anyio"})


def _table() -> dict[str, str]:
    return {name: module for module, names in pd._EXPORTS.items() for name in names}


def test_the_table_the_type_checkers_imports_and_all_list_the_same_names() -> None:
    tree = ast.parse(Path(pd.__file__).read_text(encoding="utf-8"))
    imports = {
        alias.name: str(statement.module)
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for statement in node.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
    assert imports == _table()
    assert sorted(pd.__all__) == sorted(_table())


@pytest.mark.parametrize("name", pd.__all__)
def test_every_public_name_resolves_to_its_modules_object(name: str) -> None:
    value = getattr(pd, name)
    assert value is getattr(sys.modules[f"pando_runtime_docker.{_table()[name]}"], name)


def test_a_plain_import_and_the_settings_import_no_http_stack() -> None:
    plain = modules_after("import pando_runtime_docker")
    assert not [m for m in plain if m.startswith("pando_runtime_docker.")], "on first use"
    settings = modules_after("import pando_runtime_docker as pd; pd.ADAPTER, pd.DockerConfig")
    assert "pando_runtime_docker._info" in settings
    assert not [m for m in settings if m.split(".")[0] in HTTP_ROOTS]
    adapter = modules_after("from pando_runtime_docker import DockerAdapter")
    assert "httpx" in adapter, "the check above can see it"
