"""Adapters, catalog backends and lease stores are found, listed and refused by one mechanism.

Each case runs for both kinds through their public functions; the messages, codes and
remedies are each kind's own, as they were before the two shared one mechanism.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import pando_runtime as pr
from pando_runtime import _lease_stores
from pando_runtime._adapter import _registry
from pando_runtime._plugins._kinds import PluginKind
from pando_runtime.catalog import _registry as _catalog_registry


@attrs.frozen
class Kind:
    """One plugin kind's public functions and its words."""

    register: Callable[..., None]
    available: Callable[[], list[Any]]
    load: Callable[[str], Any]
    info: str
    noun: str
    not_installed: type[pr.PandoRuntimeError]
    unknown: type[pr.PandoRuntimeError]
    expected: str
    unknown_message: str


KINDS = {
    "adapter": Kind(
        register=pr.plugin.register_adapter,
        available=pr.available_adapters,
        load=pr.load_adapter,
        info="AdapterInfo",
        noun="adapter",
        not_installed=pr.AdapterNotInstalled,
        unknown=pr.UnknownAdapter,
        expected="is neither an AdapterInfo nor a RuntimeAdapter subclass",
        unknown_message="no adapter is named 'nothing'; installed adapters: ",
    ),
    "catalog": Kind(
        register=pr.catalog.register_catalog,
        available=pr.catalog.available_catalogs,
        load=pr.catalog.load_catalog,
        info="CatalogInfo",
        noun="catalog",
        not_installed=pr.catalog.CatalogNotInstalled,
        unknown=pr.catalog.UnknownCatalog,
        expected="is not a CatalogInfo",
        unknown_message="no catalog backend is named 'nothing'; installed: ",
    ),
    "lease_store": Kind(
        register=pr.plugin.register_lease_store,
        available=pr.available_lease_stores,
        load=pr.load_lease_store,
        info="LeaseStoreInfo",
        noun="lease_store",
        not_installed=pr.LeaseStoreNotInstalled,
        unknown=pr.UnknownLeaseStore,
        expected="is not a LeaseStoreInfo",
        unknown_message="no lease store is named 'nothing'; installed: ",
    ),
}


@pytest.fixture(autouse=True)
def _clean_registrations() -> Iterator[None]:
    kinds: tuple[PluginKind[Any], ...] = (
        _registry.ADAPTERS,
        _catalog_registry.CATALOGS,
        _lease_stores.LEASE_STORES,
    )
    saved = [dict(kind.registered) for kind in kinds]
    yield
    for kind, before in zip(kinds, saved, strict=True):
        kind.registered.clear()
        kind.registered.update(before)


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]


def test_an_unknown_name_lists_the_installed_ones(kind: Kind) -> None:
    with pytest.raises(kind.unknown) as caught:
        kind.load("nothing")
    assert caught.value.message.startswith(kind.unknown_message)
    assert caught.value.details["installed"] == sorted(i.name for i in kind.available())
    assert caught.value.details[kind.noun] == "nothing"


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("no_such_module_anywhere:INFO", "cannot be imported: No module named"),
        ("json:NO_SUCH_NAME", "cannot be imported: module 'json' has no attribute"),
        ("json:dumps", ""),
    ],
)
def test_a_broken_target_is_listed_with_its_problem_and_refused_coded(
    kind: Kind, target: str, problem: str
) -> None:
    kind.register("broken", target)
    listed = {i.name: i for i in kind.available()}["broken"]
    assert listed.factory == target
    assert listed.description == ""
    with pytest.raises(kind.not_installed) as caught:
        kind.load("broken")
    assert listed.problem == caught.value.message
    if problem:
        assert caught.value.message.startswith(
            f"{kind.noun} 'broken' is registered but '{target}' {problem}"
        )
    else:
        assert caught.value.message == f"'{target}' {kind.expected}"
    assert caught.value.details == {kind.noun: "broken", "target": target}


def test_a_missing_factory_is_refused_with_the_install_hint(
    kind: Kind, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    homes = {"catalog": "pando_runtime.catalog", "lease_store": "pando_runtime.plugin"}
    home = homes.get(kind.noun, "pando_runtime")
    (tmp_path / f"light_{kind.noun}_info.py").write_text(
        f"from {home} import {kind.info} as Info\n"
        "INFO = Info(name='x', description='X', factory='not_installed_anywhere:Thing', "
        "distribution='pando-x')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    kind.register("cloud", f"light_{kind.noun}_info:INFO")
    listed = {i.name: i for i in kind.available()}["cloud"]
    assert listed.problem is None
    assert listed.description == "X"
    with pytest.raises(kind.not_installed) as caught:
        kind.load("cloud")
    assert caught.value.message.startswith(f"{kind.noun} 'cloud' cannot be imported: ")
    assert caught.value.remedy == "pip install pando-x"
    assert caught.value.details == {kind.noun: "cloud", "missing": "not_installed_anywhere"}


def test_registering_a_taken_name_or_a_bad_target_is_a_value_error(kind: Kind) -> None:
    kind.register("twice", "json:dumps")
    with pytest.raises(ValueError, match=f"^{kind.noun} 'twice' is already registered as"):
        kind.register("twice", "json:loads")
    kind.register("twice", "json:loads", clobber=True)
    with pytest.raises(ValueError, match=r"^target 'no_colon' must be 'module:attr'$"):
        kind.register("bad", "no_colon")


def test_the_install_hints_are_each_kinds_own() -> None:
    def adapter(**extra: Any) -> pr.AdapterInfo:
        return pr.AdapterInfo(name="a", description="", factory="m:a", **extra)

    def catalog(**extra: Any) -> pr.catalog.CatalogInfo:
        return pr.catalog.CatalogInfo(name="c", description="", factory="m:a", **extra)

    assert adapter().hint == "install the distribution that provides this adapter"
    assert adapter(distribution="pando-a").hint == "pip install pando-a"
    assert adapter(distribution="pando-a", install_hint="apt install a").hint == "apt install a"
    assert catalog().hint == "install the distribution that provides this catalog backend"
    assert catalog(distribution="pando-c").hint == "pip install pando-c"
