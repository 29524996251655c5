"""Finding and loading adapters: names, entry points, hints, versions, strict config."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import pando_runtime as pr
from pando_runtime._adapter import _registry
from pando_runtime.testing import FakeAdapter


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    saved = dict(_registry._registered)
    yield
    _registry._registered.clear()
    _registry._registered.update(saved)


def test_importing_and_listing_imports_no_adapter() -> None:
    code = textwrap.dedent(
        """
        import sys, json, pando_runtime
        names = [a.name for a in pando_runtime.available_adapters()]
        light = ("pando_runtime_kubernetes._info", "pando_runtime_localproc._info")
        prefixes = ("kubernetes", "pando_runtime_kubernetes.", "pando_runtime_localproc.",
                    "pando_runtime.testing")
        heavy = [m for m in sys.modules if m.startswith(prefixes) and m not in light]
        print(json.dumps({"names": names, "heavy": heavy}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out)
    assert "fake" in result["names"]
    assert result["heavy"] == []


def test_load_fake_by_name_with_config() -> None:
    adapter = pr.load_adapter("fake", {"nodes": 3, "node_cpu_millis": 1000})
    assert isinstance(adapter, FakeAdapter)
    assert len(adapter.nodes) == 3
    assert adapter.info.name == "fake"


def test_unknown_adapter_names_the_installed_ones() -> None:
    with pytest.raises(pr.UnknownAdapter) as caught:
        pr.load_adapter("nomad")
    assert "fake" in caught.value.message
    assert caught.value.code == "ADAPTER_NOT_FOUND"
    assert isinstance(caught.value, LookupError)


def test_strict_config_names_valid_keys() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_adapter("fake", {"nodez": 3, "node_cpu_millis": "lots"})
    problems = {p.path: p.message for p in caught.value.problems}
    assert set(problems) == {"nodez", "node_cpu_millis"}
    assert "valid keys are" in problems["nodez"]
    assert "node_memory_bytes" in problems["nodez"]
    assert isinstance(caught.value, ValueError)


def test_register_adapter_by_class_and_clobber() -> None:
    pr.plugin.register_adapter("memory", "pando_runtime.testing:FakeAdapter")
    assert isinstance(pr.load_adapter("memory"), FakeAdapter)
    with pytest.raises(ValueError, match="already registered"):
        pr.plugin.register_adapter("memory", "pando_runtime.testing:FakeAdapter")
    pr.plugin.register_adapter("memory", "pando_runtime.testing:FakeAdapter", clobber=True)
    with pytest.raises(ValueError, match="module:attr"):
        pr.plugin.register_adapter("bad", "no_colon")


def test_missing_module_gives_an_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "light_info.py").write_text(
        "from pando_runtime import AdapterInfo\n"
        "INFO = AdapterInfo(name='cloud', description='A cloud', "
        "factory='cloud_adapter_not_installed:Adapter', distribution='pando-runtime-cloud')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pr.plugin.register_adapter("cloud", "light_info:INFO")
    listed = {a.name: a for a in pr.available_adapters()}
    assert listed["cloud"].description == "A cloud"
    with pytest.raises(pr.AdapterNotInstalled) as caught:
        pr.load_adapter("cloud")
    assert caught.value.remedy == "pip install pando-runtime-cloud"
    pr.plugin.register_adapter("broken", "no_such_module_anywhere:INFO")
    broken = {a.name: a for a in pr.available_adapters()}["broken"]
    assert broken.problem is not None


def test_incompatible_api_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "old_info.py").write_text(
        "from pando_runtime import AdapterInfo\n"
        "INFO = AdapterInfo(name='old', description='Old', "
        "factory='pando_runtime.testing:FakeAdapter', api_version='0.9')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pr.plugin.register_adapter("old", "old_info:INFO")
    with pytest.raises(pr.IncompatibleAdapter):
        pr.load_adapter("old")
    assert {a.name: a for a in pr.available_adapters()}["old"].problem


@pytest.mark.parametrize(
    ("adapter_version", "ok"), [("1.0", True), ("1.9", False), ("2.0", False), ("x", False)]
)
def test_api_compatibility(adapter_version: str, ok: bool) -> None:
    assert pr.plugin.api_compatible(adapter_version, "1.0") is ok


def test_config_schema_for_host_uis() -> None:
    @attrs.frozen
    class Config:
        endpoint: str = pr.plugin.setting(help="Where the API is.")
        token: str = pr.plugin.setting(default="", help="API token.", secret=True)
        retries: int = pr.plugin.setting(default=3, help="How often to retry.")
        labels: dict[str, str] = pr.plugin.setting(factory=dict)
        timeout: float | None = pr.plugin.setting(default=None)

    schema = pr.config_json_schema(Config)
    assert schema["required"] == ["endpoint"]
    assert schema["properties"]["token"]["writeOnly"] is True
    assert "default" not in schema["properties"]["token"]
    assert schema["properties"]["retries"] == {
        "type": "integer",
        "description": "How often to retry.",
        "default": 3,
    }
    assert schema["properties"]["labels"]["type"] == "object"
    assert schema["properties"]["timeout"]["anyOf"][1] == {"type": "null"}
    fields = {
        f.key: f
        for f in pr.AdapterInfo(
            name="x", description="", factory="m:a", config_class=Config
        ).config_fields
    }
    assert fields["token"].secret
    assert fields["token"].default is None
    assert fields["endpoint"].required
    assert fields["labels"].default == {}
    assert "tok-123" not in repr(Config(endpoint="e", token="tok-123"))
