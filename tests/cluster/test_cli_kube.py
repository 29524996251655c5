"""The `pando-runtime` console script on the local control plane, via the Kubernetes adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from localcluster import cri_log_line
from localcluster.backends import KubeCluster

pytestmark = pytest.mark.kube

SCRIPT = Path(sys.executable).parent / "pando-runtime"


@pytest.fixture
def cli(
    kube_cluster: KubeCluster, tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess[str]]:
    settings = {"kubeconfig": str(kube_cluster.kubeconfig), "trust_network_policy": True}
    (tmp_path / "kube.json").write_text(json.dumps(settings))
    env = {
        **os.environ,
        "PANDO_RUNTIME_ADAPTER": "kubernetes",
        "PANDO_RUNTIME_CONFIG": str(tmp_path / "kube.json"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            timeout=180,
            check=False,
        )

    return run


def test_apply_observe_logs_exec_destroy(
    cli: Callable[..., subprocess.CompletedProcess[str]], kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    app = f"cli-{uuid.uuid4().hex[:8]}"
    (tmp_path / "app.yaml").write_text(
        f"bundle_id: {app}\n"
        "workloads:\n"
        "  - name: web\n"
        "    image: registry.example/web:1\n"
        "    ports: [{number: 8080}]\n"
        "    env: {GREETING: hello-from-env}\n"
    )
    assert cli("check").returncode == 0
    applied = cli("apply", "app.yaml")
    assert applied.returncode == 0, applied.stderr
    assert "1/1 running" in applied.stderr
    observed = json.loads(cli("--output", "json", "observe", app).stdout)
    assert observed["workloads"][0]["running"] is True
    assert "hello-from-env" not in json.dumps(observed)
    usage = cli("--output", "json", "usage", app)
    if kube_cluster.backend == "local":  # metrics-server serves the metrics API there
        assert usage.returncode == 0, usage.stderr
        assert json.loads(usage.stdout)["workloads"][0]["running"] is True
    else:  # other clusters may lack the metrics API: then the capability is declared missing
        assert usage.returncode in (0, 5), usage.stderr

    marker = f"log line {uuid.uuid4().hex}"
    assert kube_cluster.logs_file is not None
    with kube_cluster.logs_file.open("a", encoding="utf-8") as log:
        log.write(cri_log_line(marker))
    logs = cli("logs", app, "web")
    assert logs.returncode == 0, logs.stderr
    assert marker in logs.stdout

    executed = cli("exec", app, "web", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert executed.returncode == 3, executed.stderr
    assert executed.stdout == "out\n"
    assert "err" in executed.stderr

    destroyed = cli("destroy", app)
    assert destroyed.returncode == 0, destroyed.stderr
    deadline = time.monotonic() + 60
    while cli("observe", app).returncode != 4:
        assert time.monotonic() < deadline, "the app was not gone within 60 s"
        time.sleep(1)
