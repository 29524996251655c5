"""The version an adapter declares, and what the core adapts for one written for an older minor.

The frozen plugins of ``tests/compat`` show it end to end (the kit, a fleet, the command line);
these tests pin the mechanism's edges on the fake: which declaration wins, what is warned, what
each older minor is handed and how its answers are marked.
"""

from __future__ import annotations

import logging
import tomllib
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

import pando_runtime as pr
from pando_runtime._adapter import _registry
from pando_runtime.testing import FakeAdapter, ImageBehaviour

pytestmark = pytest.mark.anyio

SLOW_STOP = "registry.example/versions/slow-stop:1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the wrapper is backend-agnostic code; the compat suite covers the rest


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    saved = dict(_registry._registered)
    _registry._warned.clear()
    yield
    _registry._registered.clear()
    _registry._registered.update(saved)
    _registry._warned.clear()


class Written10(FakeAdapter):
    """The fake as written for API 1.0: ``observe`` without ``not_before``."""

    api_version = "1.0"

    async def observe(self, ref: pr.BundleRef) -> pr.ObservedBundle:  # type: ignore[override]
        return await super().observe(ref)


class Written12(FakeAdapter):
    api_version = "1.2"


class Written14(FakeAdapter):
    api_version = "1.4"


class Written14Sandboxed(FakeAdapter):
    api_version = "1.4"

    async def capabilities(self) -> pr.RuntimeCapabilities:
        caps = await super().capabilities()
        return attrs.evolve(caps, isolation_class=pr.IsolationClass.SANDBOXED)


def _register(name: str, cls: type, **info: Any) -> None:
    """Register ``cls`` under ``name`` through an AdapterInfo of this module, as a plugin would."""
    globals()[f"INFO_{cls.__name__}_{name}"] = pr.AdapterInfo(
        name=name, description="", factory=f"{__name__}:{cls.__name__}", **info
    )
    pr.plugin.register_adapter(name, f"{__name__}:INFO_{cls.__name__}_{name}")


def _plan(bundle_id: str = "app", **fields: Any) -> pr.BundlePlan:
    image = fields.pop("image", "registry.example/versions/web:1")
    workload = pr.WorkloadPlan(name="web", image=image)
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(workload,), **fields)


def test_an_adapter_that_declares_no_version_is_listed_as_the_oldest_once_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _register("silent", FakeAdapter)
    with caplog.at_level(logging.WARNING, logger="pando_runtime.registry"):
        for _ in range(2):
            (listed,) = [a for a in pr.available_adapters() if a.name == "silent"]
            assert listed.api_version == "1.0"
            assert listed.problem is None
    warned = [r.getMessage() for r in caplog.records if "declares no adapter API" in r.getMessage()]
    assert len([m for m in warned if "'silent'" in m]) == 1


def test_the_loaded_adapter_keeps_the_version_its_class_declares() -> None:
    _register("old", Written10)
    adapter = pr.load_adapter("old", {"nodes": 1})
    assert isinstance(adapter, pr.plugin.VersionedAdapter)
    assert isinstance(adapter.adapter, Written10)
    assert adapter.kind == "fake"
    assert adapter.info.name == "old"
    assert adapter.info.api_version == "1.0"
    assert pr.supports_api(adapter, "1.0")
    assert not pr.supports_api(adapter, "1.1")
    with pytest.raises(ValueError, match="not an adapter API version"):
        pr.supports_api(adapter, "latest")


def test_a_current_adapter_is_never_wrapped() -> None:
    adapter = pr.load_adapter("fake")
    assert type(adapter) is FakeAdapter
    assert adapter.info.api_version == pr.API_VERSION
    assert pr.supports_api(adapter, pr.API_VERSION)


def test_info_and_class_that_disagree_load_as_the_older_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _register("torn", Written14, api_version="1.2")
    with caplog.at_level(logging.WARNING, logger="pando_runtime.registry"):
        adapter = pr.load_adapter("torn")
    assert adapter.info.api_version == "1.2"
    assert any("1.2 in its info and 1.4 on its class" in r.getMessage() for r in caplog.records)


def test_another_major_is_refused_at_load_and_listed_with_its_problem() -> None:
    _register("future", FakeAdapter, api_version="2.0")
    (listed,) = [a for a in pr.available_adapters() if a.name == "future"]
    assert listed.problem is not None
    assert "2.0" in listed.problem
    with pytest.raises(pr.IncompatibleAdapter):
        pr.load_adapter("future")


async def test_observe_never_hands_not_before_to_an_implementation_without_it() -> None:
    _register("old", Written10)
    adapter = pr.load_adapter("old", {"nodes": 1})
    await adapter.apply(_plan())
    ref = pr.BundleRef("app")
    assert (await adapter.observe(ref)).exists
    assert (await adapter.observe(ref, not_before=None)).exists
    with pytest.raises(pr.CapabilityUnsupported) as caught:
        await adapter.observe(ref, not_before=datetime.now(UTC))
    assert caught.value.capability == "confirmed_observe"
    assert "1.0" in caught.value.message
    with pytest.raises(pr.InvalidInput):  # a bad value is still refused before anything else
        await adapter.observe(ref, not_before="yesterday")  # type: ignore[arg-type]
    caps = await adapter.capabilities()
    assert not caps.confirmed_observe
    assert not caps.supports(pr.Capability.CONFIRMED_OBSERVE)


async def test_an_adapter_written_for_1_1_or_later_answers_not_before_itself() -> None:
    _register("mid", Written12)
    adapter = pr.load_adapter("mid", {"nodes": 1})
    await adapter.apply(_plan())
    now = datetime.now(UTC)
    observed = await adapter.observe(pr.BundleRef("app"), not_before=now)
    assert observed.confirmed_at is not None
    assert (await adapter.capabilities()).confirmed_observe


async def test_a_pre_1_3_gone_is_marked_as_not_knowing_whether_something_still_stops() -> None:
    _register("mid", Written12)
    adapter = pr.load_adapter("mid", {"nodes": 1})
    fake = adapter.adapter  # type: ignore[attr-defined]
    fake.script_image(SLOW_STOP, ImageBehaviour(stop_grace=30.0))
    await adapter.apply(_plan(image=SLOW_STOP))
    running = await adapter.observe(pr.BundleRef("app"))
    assert running.exists
    assert not running.stopping_reported
    assert not (await adapter.capabilities()).stopping_observed
    current = pr.load_adapter("fake", {"nodes": 1})
    await current.apply(_plan())
    assert (await current.observe(pr.BundleRef("app"))).stopping_reported
    assert (await current.capabilities()).stopping_observed


async def test_a_pre_1_5_default_isolation_claims_none_and_a_floor_is_refused_unwritten() -> None:
    _register("old-iso", Written14, api_version="1.4")
    adapter = pr.load_adapter("old-iso", {"nodes": 1})
    assert (await adapter.capabilities()).isolation_class is pr.IsolationClass.PROCESS
    plan = _plan(isolation=pr.IsolationClass.CONTAINER)
    for attempt in (adapter.check_plan, adapter.apply):
        with pytest.raises(pr.CapabilityUnsupported) as caught:
            await attempt(plan)
        assert caught.value.capability == "isolation_class"
    trial = pr.TrialRequest(
        trial_id="t",
        image="registry.example/versions/web:1",
        isolation_floor=pr.IsolationClass.CONTAINER,
    )
    with pytest.raises(pr.CapabilityUnsupported):
        await adapter.trial(trial)
    fake = adapter.adapter  # type: ignore[attr-defined]
    assert fake.bundle_ids() == []
    assert fake.writes == 0
    await adapter.apply(_plan())  # no floor: it runs, as it did
    assert fake.bundle_ids() == ["app"]


async def test_a_pre_1_5_isolation_it_set_itself_stands() -> None:
    _register("old-sandbox", Written14Sandboxed, api_version="1.4")
    adapter = pr.load_adapter("old-sandbox", {"nodes": 1})
    assert (await adapter.capabilities()).isolation_class is pr.IsolationClass.SANDBOXED


async def test_a_fleet_marks_absent_as_unsure_while_a_member_cannot_report_stopping() -> None:
    _register("mid", Written12)
    members = {"old": {"adapter": "mid", "settings": {"nodes": 1}}, "new": {"adapter": "fake"}}
    async with pr.load_adapter("fleet", {"members": members}) as fleet:
        assert not (await fleet.observe(pr.BundleRef("nowhere"))).stopping_reported
        assert not (await fleet.capabilities()).stopping_observed
    async with pr.load_adapter("fleet", {"members": {"new": {"adapter": "fake"}}}) as fleet:
        assert (await fleet.observe(pr.BundleRef("nowhere"))).stopping_reported


def test_a_plugin_using_a_deprecated_name_never_breaks_listing_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "versions_deprecated_plugin.py"
    module.write_text(
        "import pando_runtime as pr\n"
        "setting = pr.setting  # deprecated since API 1.2\n"
        "INFO = pr.AdapterInfo(name='dated', description='', factory='x:Y', api_version='1.0')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pr.plugin.register_adapter("dated", "versions_deprecated_plugin:INFO")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        listed = {a.name: a for a in pr.available_adapters()}
    assert listed["fake"].problem is None
    assert listed["dated"].problem is not None
    assert "DeprecationWarning" in listed["dated"].problem
    assert "adapter API 2.0" in listed["dated"].problem


def test_the_distributions_version_follows_the_api_and_each_plugin_requires_its_range() -> None:
    """The core's ``MAJOR.MINOR`` is the API it speaks; every distribution here that needs the
    core requires a range holding today's core (what it is tested with) and no other major."""
    from packaging.requirements import Requirement  # noqa: PLC0415 - a test dependency
    from packaging.version import Version  # noqa: PLC0415

    core = Version(pr.__version__)
    assert f"{core.major}.{core.minor}" == pr.API_VERSION
    root = Path(__file__).resolve().parents[1]
    projects = [*root.glob("adapters/*/pyproject.toml"), *root.glob("examples/*/pyproject.toml")]
    assert len(projects) >= 4
    for project in projects:
        meta = tomllib.loads(project.read_text(encoding="utf-8"))["project"]
        (needed,) = [
            Requirement(r) for r in meta["dependencies"] if Requirement(r).name == "pando-runtime"
        ]
        assert needed.specifier.contains(core), f"{project}: {needed} excludes the core {core}"
        assert not needed.specifier.contains("2.0.0"), f"{project}: {needed} admits API 2"
        assert not needed.specifier.contains("1.0.0"), f"{project}: {needed} has no lower bound"
