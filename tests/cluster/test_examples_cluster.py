"""The cluster quickstart example runs on the local control plane."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from localcluster.backends import KubeCluster

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_quickstart_runs_a_full_lifecycle(kube_cluster: KubeCluster) -> None:
    args = [
        sys.executable,
        str(ROOT / "examples" / "cluster_quickstart.py"),
        "--kubeconfig",
        str(kube_cluster.kubeconfig),
    ]
    if kube_cluster.logs_file is not None:
        args += ["--logs-file", str(kube_cluster.logs_file)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for step in (
        "adapter kubernetes",
        "started db",
        "started web",
        "== logs of web",
        "svc.cluster.local:8080",
        "== destroyed",
        "lifecycle complete",
    ):
        assert step in out, step
    assert out.index("started db") < out.index("started web"), "dependencies start first"
