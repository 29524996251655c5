"""The Docker quickstart example runs on a real Docker Engine (the session's, as an engine of
the user's given by ``--host``: the example's own start of an engine is the same harness)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from localdocker import DockerEngine

ROOT = Path(__file__).resolve().parents[1]


def test_docker_quickstart_runs_a_full_lifecycle(docker_engine: DockerEngine) -> None:
    args = [
        sys.executable,
        str(ROOT / "examples" / "docker_quickstart.py"),
        "--host",
        docker_engine.base_url,
        "--image",
        docker_engine.busybox,
    ]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for step in (
        "adapter docker",
        "started db",
        "started web",
        "applied again: nothing changed\ntrue",
        "== logs of web\nweb: connected to db\nweb: listening on :8080",
        "in db: exit 0\n127.0.0.1:5432 - accepting connections",
        '"url": "http://10.',
        "== destroyed",
        "lifecycle complete",
    ):
        assert step in out, step
    assert out.index("started db") < out.index("started web"), "dependencies start first"
    assert "only-the-runtime-sees-this" not in out, "observed state never carries the env"
    owner = out.split("owner label ", 1)[1].split()[0]
    left = docker_engine.docker("ps", "-aq", "--filter", f"label=io.pando.owner={owner}")
    assert left.stdout.split() == [], "destroy removed every container of the run"
