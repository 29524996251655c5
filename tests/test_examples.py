"""The examples run as a newcomer runs them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pando_runtime as pr

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_a_full_lifecycle_on_the_fake() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for step in (
        "== applied",
        "== observed",
        "started db",
        "started web",
        "== logs of web",
        "listening on :8080",
        "exec pg_isready in db: exit 0",
        "volume snapshot",
        "== destroyed",
        "lifecycle complete",
    ):
        assert step in out, step
    assert out.index("started db") < out.index("started web"), "dependencies start first"
    assert "only-the-runtime-sees-this" not in out, "observed state never carries the env"


def test_reconcile_loop_restarts_then_gives_up() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "reconcile_loop.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("flaky: restarted worker") == 3
    assert "marked failed, not restarting" in result.stdout
    assert "events were missed: resync every app" in result.stdout
    assert "steady: restarted" not in result.stdout


def test_the_example_bundle_file_is_a_valid_plan_with_text_and_binary_files() -> None:
    plan = pr.load_bundle_file(ROOT / "examples" / "bundles" / "shop.yaml")
    assert pr.validate_plan(plan) == []
    conf, icon = plan.workloads[1].files
    assert conf.content.startswith(b"server {\n    listen 80;")
    assert icon.content.startswith(b"\x00\x00\x01\x00")
    assert icon.mode == 0o444


def test_the_replica_host_applies_what_it_owns_journals_it_and_leaves_on_sigterm(
    tmp_path: Path,
) -> None:
    """One replica alone on the fake owns every app; the cluster tests run three on Kubernetes."""
    journal = tmp_path / "a.jsonl"
    host = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "examples" / "replicas" / "replica_host.py"),
            "--adapter=fake",
            "--replica=a",
            "--apps=5",
            f"--journal={journal}",
        ],
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60  # only catches a hang
        while _read(journal).count('"applied"') < 5:
            assert host.poll() is None, host.stderr.read() if host.stderr else ""
            assert time.monotonic() < deadline, _read(journal)
            time.sleep(0.1)
        host.send_signal(signal.SIGTERM)
        assert host.wait(timeout=30) == 0
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [e["event"] for e in events][:2] == ["joined", "gained"]
    assert events[0]["members"] == ["a"]
    assert sorted(events[1]["apps"]) == [f"app-{n}" for n in range(5)]
    applied = [e for e in events if e["event"] == "apply" and e["phase"] == "end"]
    assert sorted(e["app"] for e in applied) == [f"app-{n}" for n in range(5)]
    assert {e["result"] for e in applied} == {"applied"}
    assert events[-1]["event"] == "left"


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
