"""The quickstart on a real Kubernetes API server: a local control plane started for the run.

kube-apiserver, etcd, the controller-manager, the scheduler and kwok (simulated nodes and pods)
are built from pinned Go modules by ``tools/controlplane/build.sh`` (once, cached) and started on
127.0.0.1; the quickstart's lifecycle then runs through the Kubernetes adapter, unchanged.

    python examples/cluster_quickstart.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import quickstart  # noqa: E402 - beside this file
from localcluster import LocalCluster, cri_log_line  # noqa: E402 - the test support package


def run_on(kubeconfig: Path, logs_file: Path | None) -> int:
    """Run the quickstart's lifecycle through the Kubernetes adapter on that cluster."""
    if logs_file is not None:  # kwok runs nothing: pods' log is one file the cluster serves
        with logs_file.open("a", encoding="utf-8") as log:
            for line in ("web: connected to db", "web: listening on :8080"):
                log.write(cri_log_line(line))
    settings = {"kubeconfig": str(kubeconfig), "trust_network_policy": True}
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


def main(argv: list[str] | None = None) -> int:
    """Start the local control plane (unless given a kubeconfig), run the lifecycle, stop it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, help="use this cluster instead of starting one")
    parser.add_argument("--logs-file", type=Path, help="the local cluster's pod log file")
    args = parser.parse_args(argv)
    if args.kubeconfig:
        return run_on(args.kubeconfig, args.logs_file)
    print("starting a local Kubernetes control plane (etcd, kube-apiserver, kwok) ...")
    with LocalCluster() as cluster:
        print(f"cluster up; kubeconfig {cluster.kubeconfig}")
        return run_on(cluster.kubeconfig, cluster.logs_file)


if __name__ == "__main__":
    sys.exit(main())
