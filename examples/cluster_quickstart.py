"""The quickstart on a real Kubernetes API server: a local control plane started for the run.

kube-apiserver, etcd, the controller-manager, the scheduler and kwok (simulated nodes and pods)
are built from pinned Go modules by ``tools/controlplane/build.sh`` (once, cached) and started on
127.0.0.1; the quickstart's lifecycle then runs through the Kubernetes adapter, unchanged.

    python examples/cluster_quickstart.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import quickstart  # noqa: E402 - beside this file
from localcluster import LocalCluster, cri_log_line  # noqa: E402 - the test support package


def main() -> int:
    """Start the local control plane, run the lifecycle on it, stop it."""
    print("starting a local Kubernetes control plane (etcd, kube-apiserver, kwok) ...")
    with LocalCluster() as cluster:
        # kwok simulates pods: nothing runs, so their log comes from one file the cluster serves.
        with cluster.logs_file.open("a", encoding="utf-8") as log:
            for line in ("web: connected to db", "web: listening on :8080"):
                log.write(cri_log_line(line))
        settings = {"kubeconfig": str(cluster.kubeconfig), "trust_network_policy": True}
        print(f"cluster up; kubeconfig {cluster.kubeconfig}")
        print("note: kwok runs exec commands on this machine, so the probe is a plain shell")
        return anyio.run(
            quickstart.main,
            [
                "--adapter",
                "kubernetes",
                "--config",
                json.dumps(settings),
                "--probe",
                "sh -c 'echo db: accepting connections'",
            ],
        )


if __name__ == "__main__":
    sys.exit(main())
