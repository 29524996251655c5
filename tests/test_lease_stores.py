"""The lease-store rules catch a store that breaks them; the kind refuses what cannot work.

The rules (``LeaseStoreConformance``) pass on the fake's in-memory store and fail, each where
it should, on deliberately broken stores: one whose versions restart after a delete and a
re-create, one whose second client reads from a stale copy (every read, or only the read of one
lease). The real stores pass them in their own distributions' tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import pando_runtime as pr
from pando_runtime import _lease_stores
from pando_runtime.plugin import LeaseConflict, LeaseRecord, LeaseStoreClient, StoredLease
from pando_runtime.testing import FakeLeaseStore
from pando_runtime.testing.conformance import LeaseStoreConformance

pytestmark = pytest.mark.anyio

RULES = LeaseStoreConformance()


class RestartingVersions:
    """Broken: each lease counts its own versions from 1, so a re-created one repeats them."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], StoredLease] = {}

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        return tuple(lease for (g, _), lease in sorted(self.leases.items()) if g == group)

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        return self.leases.get((group, name))

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        current = self.leases.get((group, name))
        if (current.version if current else None) != version:
            raise LeaseConflict("changed")
        stored = StoredLease(name=name, record=record, version=str(int(version or 0) + 1))
        self.leases[(group, name)] = stored
        return stored

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        current = self.leases.get((group, name))
        if current is not None and current.version == version:
            del self.leases[(group, name)]

    async def aclose(self) -> None:
        pass


@attrs.define
class StaleReads:
    """Broken: writes reach the store, but the ``stale`` reads (``list``, ``read`` of one
    lease) come from a copy of the group taken at the first read."""

    store: LeaseStoreClient
    stale: frozenset[str]
    copy: dict[str, tuple[StoredLease, ...]] = attrs.field(factory=dict)

    async def _copy(self, group: str) -> tuple[StoredLease, ...]:
        if group not in self.copy:
            self.copy[group] = await self.store.list_leases(group)
        return self.copy[group]

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        if "list" in self.stale:
            return await self._copy(group)
        return await self.store.list_leases(group)

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        if "read" in self.stale:
            return next((lease for lease in await self._copy(group) if lease.name == name), None)
        return await self.store.read_lease(group, name)

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        return await self.store.write_lease(group, name, record, version=version)

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        await self.store.delete_lease(group, name, version=version)

    async def aclose(self) -> None:
        pass


RULE_TESTS = sorted(name for name in dir(LeaseStoreConformance) if name.startswith("test_"))


@pytest.mark.parametrize("rule", RULE_TESTS)
async def test_the_fakes_store_keeps_every_rule(rule: str) -> None:
    store = FakeLeaseStore()
    await getattr(RULES, rule)((store, store))


async def test_versions_that_restart_after_a_re_create_are_caught() -> None:
    store = RestartingVersions()
    with pytest.raises(AssertionError, match="version repeated"):
        await RULES.test_a_version_never_repeats_after_a_delete_and_a_re_create((store, store))
    for rule in RULE_TESTS:  # the one rule it breaks is the one that fails
        if rule != "test_a_version_never_repeats_after_a_delete_and_a_re_create":
            await getattr(RULES, rule)((store, store))


@pytest.mark.parametrize(
    ("stale", "caught"),
    [
        ({"list", "read"}, "a read missed a finished create"),
        ({"read"}, "reads disagree"),  # a read of one lease from a cache, lists fresh
    ],
)
async def test_reads_from_a_stale_copy_are_caught(stale: set[str], caught: str) -> None:
    store = FakeLeaseStore()
    with pytest.raises(AssertionError, match=caught):
        await RULES.test_every_read_sees_every_finished_write_of_another_client(
            (store, StaleReads(store, frozenset(stale)))
        )


@pytest.fixture
def _clean_registrations() -> Iterator[None]:
    saved = dict(_lease_stores.LEASE_STORES.registered)
    yield
    _lease_stores.LEASE_STORES.registered.clear()
    _lease_stores.LEASE_STORES.registered.update(saved)


def _info_module(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **fields: str
) -> str:
    """A light module ``module`` whose ``INFO`` is a LeaseStoreInfo with ``fields``."""
    values = ", ".join(f"{key}={value!r}" for key, value in fields.items())
    (tmp_path / f"{module}.py").write_text(
        "from pando_runtime.plugin import LeaseStoreInfo\n"
        f"INFO = LeaseStoreInfo(name='x', description='X', {values})\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{module}:INFO"


@pytest.mark.usefixtures("_clean_registrations")
def test_a_store_for_another_major_or_a_newer_minor_is_listed_with_its_problem_and_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _info_module(
        "future_store_info", tmp_path, monkeypatch, factory="json:dumps", api_version="2.0"
    )
    pr.plugin.register_lease_store("future", target)
    (listed,) = [i for i in pr.available_lease_stores() if i.name == "future"]
    assert listed.problem is not None
    assert "written for API '2.0'" in listed.problem
    with pytest.raises(pr.LeaseStoreNotInstalled) as caught:
        pr.load_lease_store("future")
    assert caught.value.details == {"lease_store": "future", "api_version": "2.0"}


@pytest.mark.usefixtures("_clean_registrations")
def test_a_factory_that_makes_no_lease_store_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _info_module("dict_store_info", tmp_path, monkeypatch, factory="builtins:str")
    pr.plugin.register_lease_store("not-a-store", target)
    with pytest.raises(pr.LeaseStoreNotInstalled, match="did not return a lease store"):
        pr.load_lease_store("not-a-store")


def test_the_installed_stores_are_listed_with_how_they_read() -> None:
    listed = {info.name: info for info in pr.available_lease_stores()}
    assert {"consul", "etcd", "kubernetes", "postgres"} <= listed.keys()
    for info in listed.values():
        assert info.problem is None, info
        assert info.reads, f"{info.name} says how its reads see every finished write"
