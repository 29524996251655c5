"""Plugins frozen at adapter API 1.0, 1.2 and 1.3, on today's core (issue 43).

Each loads with the version it was written for, works as a fleet member and from the command
line; a host using what came after it (``not_before``, ``stopping``, ``isolation``,
``FLEET_CHANGED``) gets the documented answer, never a crash or a silent wrong one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from compat_harness import DEAF, process_runs
from conftest import PLUGINS

import pando_runtime as pr
from pando_runtime.testing import MemoryCatalog

pytestmark = pytest.mark.anyio

SCRIPT = Path(sys.executable).parent / "pando-runtime"
PRE_1_3 = ("compat-1.0", "compat-1.2")
GRACE = 1.0  # seconds a process ignoring SIGTERM runs on after a destroy: the window observed


def _plan(
    bundle_id: str,
    script: str = "while :; do sleep 1; done",
    ports: tuple[pr.Port, ...] = (),
    **fields: Any,
) -> pr.BundlePlan:
    web = pr.WorkloadPlan(
        name="web", image="compat/ignored:1", command=("sh", "-c", script), ports=ports
    )
    return pr.BundlePlan(bundle_id=bundle_id, workloads=(web,), **fields)


def _settings(root: Path) -> dict[str, Any]:
    return {"root": str(root), "stop_grace_seconds": GRACE, "poll_seconds": 0.02}


async def _until(
    adapter: pr.RuntimeAdapter, bundle_id: str, check: Callable[[pr.ObservedBundle], bool]
) -> pr.ObservedBundle:
    """Observe until ``check`` holds (a guard bounds a hang)."""
    with anyio.fail_after(20):
        while not check(observed := await adapter.observe(pr.BundleRef(bundle_id))):
            await anyio.sleep(0.02)
    return observed


def _running(observed: pr.ObservedBundle) -> bool:
    return observed.all_running


def _fleet(name: str, root: Path, **settings: Any) -> pr.RuntimeAdapter:
    """A fleet whose new apps go to the plugin ``name`` (member ``plugin``) beside a fake."""
    members = {
        "plugin": {"adapter": name, "settings": _settings(root)},
        "fake": {"adapter": "fake", "place_new_apps": False},
    }
    return pr.load_adapter("fleet", {"members": members, **settings})


# -- the declared version ---------------------------------------------------------------------


@pytest.mark.parametrize(("name", "version"), PLUGINS.items())
def test_each_loads_with_the_version_it_was_written_for(
    name: str, version: str, tmp_path: Path
) -> None:
    adapter = pr.load_adapter(name, {"root": str(tmp_path)})
    assert adapter.info.api_version == version
    assert pr.supports_api(adapter, version)
    assert pr.supports_api(adapter, "1.0")
    assert not pr.supports_api(adapter, "1.4"), "written before 1.4: it cannot know 1.4"


def test_the_undeclared_plugin_is_taken_as_1_0_with_a_warning_naming_it(tmp_path: Path) -> None:
    code = (
        "import logging, pando_runtime as pr; logging.basicConfig();"
        f" print(pr.load_adapter('compat-1.0', {{'root': {str(tmp_path)!r}}}).info.api_version)"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "1.0"
    warnings = [
        line
        for line in loaded.stderr.splitlines()
        if line.startswith("WARNING:pando_runtime.registry:")
    ]
    assert any("compat-1.0" in line for line in warnings), loaded.stderr


def test_listing_with_deprecations_as_errors_lists_every_adapter() -> None:
    # -W error: the 1.0 plugin's deprecated names (pr.setting) raise in its info module. That
    # one may be listed with its problem; the others are listed as ever, and listing works.
    code = (
        "import json, pando_runtime as pr;"
        " print(json.dumps({a.name: a.problem for a in pr.available_adapters()}))"
    )
    listed = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    problems = json.loads(listed.stdout)
    assert set(PLUGINS) | {"fake", "fleet", "localproc"} <= set(problems)
    assert problems["compat-1.2"] is None
    assert problems["compat-1.3"] is None
    assert problems["fake"] is None
    assert problems["compat-1.0"] is None or "setting" in problems["compat-1.0"]


# -- the command line -------------------------------------------------------------------------


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(cwd)}
    env.pop("PANDO_RUNTIME_ADAPTER", None)
    env.pop("PANDO_RUNTIME_CONFIG", None)
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        input="",
        timeout=60,
        check=False,
        cwd=cwd,
    )


def test_the_command_line_lists_each_with_its_version(tmp_path: Path) -> None:
    listed = _cli("--output", "json", "adapters", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    versions = {a["name"]: (a["api_version"], a["problem"]) for a in json.loads(listed.stdout)}
    assert {name: versions[name] for name in PLUGINS} == {
        name: (version, None) for name, version in PLUGINS.items()
    }


@pytest.mark.parametrize("name", PLUGINS)
def test_the_command_line_runs_an_app_on_each(name: str, tmp_path: Path) -> None:
    (tmp_path / "app.json").write_text(pr.to_json(_plan("hello")))
    root = tmp_path / "root"
    root.mkdir()
    applied = _cli(
        "--adapter", name, "--set", f"root={root}", "--output", "json", "apply", "app.json",
        cwd=tmp_path,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    observed = json.loads(applied.stdout)
    assert observed["exists"] is True
    assert [w["running"] for w in observed["workloads"]] == [True]


# -- as a fleet member ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "version"), PLUGINS.items())
async def test_each_works_as_a_fleet_member(name: str, version: str, tmp_path: Path) -> None:
    plan = _plan("shop")
    ref = pr.BundleRef(plan.bundle_id)
    async with _fleet(name, tmp_path) as fleet:
        assert (await fleet.apply(plan)).details["member"] == "plugin"
        await _until(fleet, plan.bundle_id, _running)
        asked = datetime.now(UTC)
        if version == "1.0":  # written before observe took not_before: said, not a TypeError
            with pytest.raises(pr.CapabilityUnsupported) as caught:
                await fleet.observe(ref, not_before=asked)
            assert caught.value.capability == "confirmed_observe"
        else:
            confirmed = await fleet.observe(ref, not_before=asked)
            assert confirmed.all_running
            assert confirmed.confirmed_at is not None
            assert confirmed.confirmed_at >= asked
        await fleet.destroy(ref)
        assert not (await fleet.observe(ref)).exists


# -- what came later: not_before (1.1), stopping (1.3), isolation (1.5), FLEET_CHANGED (1.6) ---


@pytest.mark.parametrize("name", PLUGINS)
async def test_observe_not_before_is_answered_or_refused_as_documented(
    name: str, tmp_path: Path
) -> None:
    plan = _plan("shop")
    ref = pr.BundleRef(plan.bundle_id)
    async with pr.load_adapter(name, _settings(tmp_path)) as adapter:
        await adapter.apply(plan)
        await _until(adapter, plan.bundle_id, _running)  # without not_before: every plugin
        asked = datetime.now(UTC)
        if name == "compat-1.0":
            with pytest.raises(pr.CapabilityUnsupported) as caught:
                await adapter.observe(ref, not_before=asked)
            assert caught.value.capability == "confirmed_observe"
            assert (await adapter.capabilities()).confirmed_observe is False
            return
        confirmed = await adapter.observe(ref, not_before=asked)
        assert confirmed.confirmed_at is not None
        assert confirmed.confirmed_at >= asked


@pytest.mark.parametrize(
    ("name", "via_fleet"),
    [(name, False) for name in PLUGINS] + [(name, True) for name in PRE_1_3],
)
async def test_a_destroy_while_a_process_still_runs_is_never_a_silent_gone(
    name: str, via_fleet: bool, tmp_path: Path
) -> None:
    # The process ignores SIGTERM: it runs on for the grace after the destroy began. Before
    # 1.3, "gone" promised nothing about that; the answer must say it does not know.
    plan = _plan("deaf", DEAF)
    ref = pr.BundleRef(plan.bundle_id)
    adapter = _fleet(name, tmp_path) if via_fleet else pr.load_adapter(name, _settings(tmp_path))
    async with adapter, anyio.create_task_group() as group:
        await adapter.apply(plan)
        observed = await _until(adapter, plan.bundle_id, _running)
        instance_id = observed.workload("web").instance_id
        assert instance_id is not None
        with anyio.fail_after(20):
            while not await anyio.Path(tmp_path / "bundles" / "deaf" / "web" / "deaf").exists():
                await anyio.sleep(0.02)
        group.start_soon(adapter.destroy, ref)
        during = await _until(
            adapter,
            plan.bundle_id,
            lambda o: not o.exists or any(w.stopping for w in o.workloads),
        )
        assert process_runs(instance_id), "the grace ended before the answer: nothing shown"
        caps = await adapter.capabilities()
        if name in PRE_1_3:
            assert not during.exists  # what the plugin says, as it always said it
            assert during.stopping_reported is False
            assert caps.stopping_observed is False
        else:
            assert during.exists
            assert during.workload("web").stopping
            assert during.stopping_reported is True
            assert caps.stopping_observed is True


@pytest.mark.parametrize("name", PLUGINS)
async def test_a_plan_asking_for_container_isolation_is_refused_before_anything_runs(
    name: str, tmp_path: Path
) -> None:
    # None of them declared an isolation class: they run bare processes, under the pre-1.5
    # default that claimed containers.
    plan = _plan("boxed", isolation=pr.IsolationClass.CONTAINER)
    async with pr.load_adapter(name, _settings(tmp_path)) as adapter:
        assert (await adapter.capabilities()).isolation_class is pr.IsolationClass.PROCESS
        with pytest.raises(pr.CapabilityUnsupported) as caught:
            await adapter.apply(plan)
        assert caught.value.capability == "isolation_class"
        assert not (tmp_path / "bundles").exists(), "a sandbox was made"
        assert not (await adapter.observe(pr.BundleRef(plan.bundle_id))).exists


async def test_a_members_file_change_is_said_and_a_catalog_source_keeps_publishing(
    tmp_path: Path,
) -> None:
    # A host's event consumer written before 1.6 (the core's catalog source) meets
    # FLEET_CHANGED, a kind it does not know, and ignores it.
    members_file = tmp_path / "members.json"
    members_file.write_text(json.dumps({"members": {}}))
    fleet = pr.load_adapter(
        "fleet",
        {
            "members": {"first": {"adapter": "compat-1.2", "settings": _settings(tmp_path / "a")}},
            "members_file": str(members_file),
            "members_file_poll": 0.05,
        },
    )
    catalog = MemoryCatalog()
    syncer = pr.catalog.CatalogSyncer(catalog)
    source = pr.catalog.BundleSource(fleet, syncer)
    served = _plan("shop", ports=(pr.Port(8080),))
    async with fleet, fleet.watch_bundles() as events, syncer.running(), source.running():
        assert (await anext(events)).kind is pr.BundleEventKind.WATCHING
        late = {"adapter": "compat-1.3", "settings": _settings(tmp_path / "b")}
        members_file.write_text(json.dumps({"members": {"late": late}}))
        with anyio.fail_after(20):
            while (changed := await anext(events)).kind is not pr.BundleEventKind.FLEET_CHANGED:
                pass
        assert changed.details == {"change": "joined", "member": "late"}
        source.track(served)
        await fleet.apply(served)
        with anyio.fail_after(20):
            while [r.service for r in catalog.registrations.values()] != ["shop-web"]:
                await syncer.wait_pass()
