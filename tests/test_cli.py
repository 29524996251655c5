"""The ``pando-runtime`` console script, run as an operator runs it, against the fake adapter."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pando_runtime.testing import make_tar, read_tar

SCRIPT = Path(sys.executable).parent / "pando-runtime"

BUNDLE = """\
bundle_id: shop
workloads:
  - name: web
    image: nginx:1.27
    ports: [{number: 80}]
    resources: {cpu_millis: 250, memory_bytes: 134217728}
    mounts: [{volume_id: data, path: /srv}]
volumes:
  - {volume_id: data, name: data}
"""


@pytest.fixture
def cli(tmp_path: Path):
    env = {
        **{k: v for k, v in os.environ.items() if k != "XDG_STATE_HOME"},
        "HOME": str(tmp_path),
        "PANDO_RUNTIME_ADAPTER": "fake",
        "PANDO_RUNTIME_CONFIG": str(tmp_path / "fake.yaml"),
    }
    (tmp_path / "fake.yaml").write_text(f"state_file: {tmp_path / 'world.json'}\n")

    def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(SCRIPT), *args],
            capture_output=True,
            env=env,
            input=stdin if stdin is not None else b"",  # never the terminal
            timeout=60,
            check=False,
            cwd=tmp_path,
        )

    return run


def test_the_console_script_is_installed() -> None:
    assert SCRIPT.exists(), "pip install -e . installs the pando-runtime console script"


def test_adapters_lists_the_fake_with_capabilities(cli) -> None:
    listed = cli("--output", "json", "adapters", "--capabilities")
    assert listed.returncode == 0, listed.stderr
    fake = {a["name"]: a for a in json.loads(listed.stdout)}["fake"]
    assert "exec" in fake["capabilities"]
    assert {s["key"] for s in fake["settings"]} >= {"nodes", "state_file"}


def test_a_whole_lifecycle(cli, tmp_path: Path) -> None:
    (tmp_path / "shop.yaml").write_text(BUNDLE)
    assert cli("check").returncode == 0
    assert cli("validate", "shop.yaml").returncode == 0
    applied = cli("apply", "shop.yaml")
    assert applied.returncode == 0, applied.stderr
    assert b"waiting for shop: 1/1 running" in applied.stderr
    observed = json.loads(cli("--output", "json", "observe", "shop").stdout)
    assert observed["workloads"][0]["running"] is True
    (tmp_path / "in.tar").write_bytes(make_tar({"index.html": b"<h1>hi</h1>"}))
    assert cli("volume", "restore", "shop", "data", "in.tar").returncode == 0
    assert cli("volume", "snapshot", "shop", "data", "out.tar").returncode == 0
    assert read_tar((tmp_path / "out.tar").read_bytes()) == {"index.html": b"<h1>hi</h1>"}
    capacity = json.loads(cli("--output", "json", "capacity").stdout)
    assert capacity["running_workloads"] == 1
    usage = json.loads(cli("--output", "json", "usage", "shop").stdout)
    (web,) = usage["workloads"]
    assert (web["workload"], web["running"]) == ("web", True)
    assert (web["cpu_limit_millis"], web["memory_limit_bytes"]) == (250, 134217728)
    table = cli("usage", "shop").stdout.decode()
    assert "CPU LIMIT" in table
    assert "250" in table
    total = json.loads(cli("--output", "json", "usage").stdout)
    assert set(total) >= {"cpu_millis", "memory_bytes", "reported_at"}
    assert cli("usage", "absent").returncode == 4
    executed = cli("exec", "shop", "web", "--", "no-such-command")
    assert executed.returncode == 127
    assert b"command not found" in executed.stderr
    assert b"RUNNING" in cli("stop", "shop").stdout
    stopped = json.loads(cli("--output", "json", "observe", "shop").stdout)
    assert stopped["workloads"][0]["running"] is False
    assert cli("logs", "shop", "web").returncode == 4, "a stopped workload has no instance"
    assert cli("destroy", "shop", "--volumes").returncode == 0
    assert cli("observe", "shop").returncode == 4


def test_invalid_bundle_lists_every_problem_with_exit_2(cli, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "bundle_id: shop\nworkloads:\n  - {name: Web, image: nginx, ports: [{number: 0}]}\n"
    )
    validated = cli("--output", "json", "validate", "bad.yaml")
    assert validated.returncode == 2
    paths = {p["path"] for p in json.loads(validated.stdout)["problems"]}
    assert paths == {"workloads[0].name", "workloads[0].ports[0].number"}
    applied = cli("apply", "bad.yaml")
    assert applied.returncode == 2
    assert b"error [INVALID_PLAN]" in applied.stderr
    assert b"remedy:" in applied.stderr
    (tmp_path / "typo.yaml").write_text("bundle_id: shop\nworkloadz: []\n")
    typo = cli("--output", "json", "validate", "typo.yaml")
    assert typo.returncode == 2
    assert json.loads(typo.stdout)["error"]["code"] == "INVALID_PLAN"


def test_unknown_adapter_and_bad_settings(cli) -> None:
    unknown = cli("--adapter", "nomad", "check")
    assert unknown.returncode == 4
    assert b"ADAPTER_NOT_FOUND" in unknown.stderr
    bad = cli("--set", "nodez=3", "check")
    assert bad.returncode == 2
    assert b"valid keys are" in bad.stderr


def test_watch_prints_events(cli) -> None:
    watched = cli("--output", "json", "watch", "--count", "1")
    assert watched.returncode == 0
    assert json.loads(watched.stdout.splitlines()[0])["kind"] == "watching"


RST_MARKUP = re.compile(r"``|:(class|meth|func|attr|mod):`|`[^`\s][^`]*`_")


def test_help_is_plain_text_with_no_restructuredtext(cli) -> None:
    top = cli("--help")
    assert top.returncode == 0
    text = top.stdout.decode()
    assert "pando-runtime: an operator's command line over any adapter." in text
    assert "Exit codes: 0 done" in text
    commands = re.search(r"\{(adapters,[a-z,]+)\}", text)
    assert commands is not None
    for page in [text] + [
        cli(command, "--help").stdout.decode() for command in commands.group(1).split(",")
    ]:
        assert not RST_MARKUP.search(page), page
