"""The public surface holds its promise: each change is a new minor with its changelog entry,
and nothing an earlier minor of the same major gave is gone.

``tools/api_surface.py`` reads the surface from the imported core; ``api/surface-<minor>.json``
are the committed snapshots (those of 1.0 to 1.5 made from history, frozen), and
``api/allowed-breaks.toml`` the breaks let through, each with its reason.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import pando_runtime as pr

ROOT = Path(__file__).resolve().parent.parent


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_surface", ROOT / "tools" / "api_surface.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tool = _load_tool()


@pytest.fixture(scope="module")
def snapshots() -> dict[str, Any]:
    return tool.load_snapshots()


@pytest.fixture(scope="module")
def current(snapshots: dict[str, Any]) -> dict[str, Any]:
    return tool.extract(tool.probes_from(snapshots, before=pr.API_VERSION))


def test_the_surface_is_the_snapshot_of_its_api_version(snapshots, current) -> None:
    assert current["api_version"] == pr.API_VERSION
    problems = tool.snapshot_problems(snapshots, current)
    assert not problems, problems[0]


def test_nothing_an_earlier_minor_gave_is_gone(snapshots, current) -> None:
    earlier = [v for v in snapshots if tool.parse_version(v) < tool.parse_version(pr.API_VERSION)]
    assert earlier, "the snapshots of the earlier minors are committed"
    problems = tool.break_problems(snapshots, current, tool.load_allowed())
    assert not problems, "\n\n".join(problems)


def test_the_changelog_has_each_api_version_and_what_a_plugin_must_do(snapshots) -> None:
    problems = tool.changelog_problems(sorted({*snapshots, pr.API_VERSION}))
    assert not problems, "\n".join(problems)


def test_the_changelog_check_wants_a_section_of_that_very_version_with_an_answer(
    tmp_path,
) -> None:
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(
        "# Changelog\n\n## [Unreleased]\n\n### Adapter API 1.7\n\n"
        "<!-- What a plugin must do: to be written -->\n\n"
        "## [API 1.61] - 2027-01-01\n\n**What a plugin must do:** nothing.\n\n"
        "## [API 1.6] - 2026-12-06\n\n### Added\n\n- API 1.5 named in a line.\n\n"
        "## [API 1.5] - 2026-12-06\n\n**What a plugin must do:** nothing.\n",
        encoding="utf-8",
    )
    assert tool.changelog_problems(["1.5"], changelog) == []
    assert tool.changelog_problems(["1.4"], changelog) == [
        "CHANGELOG.md has no heading for adapter API 1.4"
    ]
    for version in ("1.6", "1.7"):  # a section with no answer; a placeholder's comment
        [problem] = tool.changelog_problems([version], changelog)
        assert "does not say what a plugin must do" in problem


def _names(surface: dict[str, Any], namespace: str = "pando_runtime") -> dict[str, Any]:
    names: dict[str, Any] = surface["namespaces"][namespace]["names"]
    return names


def test_a_removed_name_a_new_required_parameter_and_a_changed_default_are_caught(
    snapshots, current
) -> None:
    altered = copy.deepcopy(current)
    names = _names(altered)
    del names["validate_plan"]
    names["load_adapter"]["parameters"].append(
        {"name": "timeout", "kind": "keyword_only", "required": True}
    )
    names["Port"]["fields"]["protocol"]["default"] = "PortProtocol.UDP"
    names["RuntimeAdapter"]["methods"]["apply"]["parameters"].append(
        {"name": "dry_run", "kind": "keyword_only", "required": False, "default": "False"}
    )
    del names["BundleEventKind"]["members"]["MISSED"]

    found = {(b.path, b.rule) for b in tool.breaks(current, altered)}

    assert found == {
        ("pando_runtime.validate_plan", "removed"),
        ("pando_runtime.load_adapter(timeout)", "new required parameter"),
        ("pando_runtime.Port.protocol", "default changed"),
        ("pando_runtime.RuntimeAdapter.apply(dry_run)", "new parameter"),
        ("pando_runtime.BundleEventKind.MISSED", "removed"),
    }
    # Against the snapshot of its own minor, each is a difference too, and none is excused.
    changed = "\n".join(tool.differences(current, altered))
    for path in ("validate_plan", "load_adapter.parameters", "Port.fields.protocol.default"):
        assert path in changed
    altered["api_version"] = "1.99"
    unexcused, _ = tool.unexcused_breaks({"1.98": current}, altered, tool.load_allowed())
    assert len(unexcused) == len(found)
    # An allowed break (1.1's rename of the enum) excuses that change only, not a later one.
    unexcused, _ = tool.unexcused_breaks({"1.0": snapshots["1.0"]}, altered, tool.load_allowed())
    assert any(
        b.startswith(
            "pando_runtime.Port.protocol: default changed (Protocol.TCP -> PortProtocol.UDP)"
        )
        for b in unexcused
    ), unexcused


def test_a_signature_read_from_code_is_held_to_its_earlier_form() -> None:
    def load(name: str, config: object = None) -> None: ...

    def load_later(name: str, config: object = None, *, timeout: float) -> None: ...

    def load_reordered(config: object, name: str) -> None: ...

    def surface(function: Any) -> dict[str, Any]:
        described = tool._describe_callable(function, kind="function")
        return {"namespaces": {"pando_runtime": {"names": {"load": described}}}}

    assert [(b.path, b.rule) for b in tool.breaks(surface(load), surface(load_later))] == [
        ("pando_runtime.load(timeout)", "new required parameter")
    ]
    assert {(b.path, b.rule) for b in tool.breaks(surface(load), surface(load_reordered))} == {
        ("pando_runtime.load(name)", "position changed"),
        ("pando_runtime.load(config)", "position changed"),
        ("pando_runtime.load(config)", "became required"),
    }


def test_a_released_minors_snapshot_is_never_written_over_with_another_surface(
    tmp_path, capsys, monkeypatch
) -> None:
    snapshot = tmp_path / "surface.json"
    stale = '{"api_version": "1.6", "namespaces": {}}\n'
    snapshot.write_text(stale, encoding="utf-8")
    changelog = tmp_path / "CHANGELOG.md"
    monkeypatch.setattr(tool, "CHANGELOG", changelog)

    # Released (not the minor under [Unreleased]): its snapshot is its record.
    changelog.write_text("## [Unreleased] - adapter API 9.9\n", encoding="utf-8")
    assert tool.main(["--write", "--output", str(snapshot)]) == 1
    assert snapshot.read_text(encoding="utf-8") == stale
    assert "a change of the surface is a new minor" in capsys.readouterr().out

    # The minor still under [Unreleased] grows with what merges before its release.
    changelog.write_text(f"## [Unreleased] - adapter API {pr.API_VERSION}\n", encoding="utf-8")
    assert tool.main(["--write", "--output", str(snapshot)]) == 0
    assert snapshot.read_text(encoding="utf-8") != stale
