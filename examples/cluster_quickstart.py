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

STORAGE_CLASS = "pando-quickstart-manual"


def provide_volumes(kubeconfig: Path) -> dict[str, str]:
    """What an administrator does on a cluster without a volume provisioner (this one).

    A StorageClass that binds at once and a few hostPath PersistentVolumes for the app's claims;
    the adapter's settings name the class and where its volume helper mounts a claim (kwok runs
    the helper's tar on this machine, so that is a local directory).
    """
    import tempfile  # noqa: PLC0415

    from kubernetes import client, config  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    root = Path(tempfile.mkdtemp(prefix="pando-quickstart-volumes-"))
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        try:
            client.StorageV1Api(api).create_storage_class(
                {
                    "metadata": {"name": STORAGE_CLASS},
                    "provisioner": "kubernetes.io/no-provisioner",
                    "volumeBindingMode": "Immediate",
                }
            )
        except ApiException as error:
            if error.status != 409:  # noqa: PLR2004 - already there
                raise
        for i in range(2):
            client.CoreV1Api(api).create_persistent_volume(
                {
                    "metadata": {"name": f"{root.name.lower().replace('_', '-')}-{i}"},
                    "spec": {
                        "capacity": {"storage": "10Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": STORAGE_CLASS,
                        "hostPath": {"path": str(root / f"pv{i}"), "type": "DirectoryOrCreate"},
                    },
                }
            )
    finally:
        api.close()
    return {"storage_class": STORAGE_CLASS, "helper_mount_root": str(root / "mounts")}


def run_on(kubeconfig: Path, logs_file: Path | None) -> int:
    """Run the quickstart's lifecycle through the Kubernetes adapter on that cluster."""
    settings: dict[str, object] = {"kubeconfig": str(kubeconfig), "trust_network_policy": True}
    if logs_file is not None:  # kwok runs nothing: pods' log is one file the cluster serves
        with logs_file.open("a", encoding="utf-8") as log:
            for line in ("web: connected to db", "web: listening on :8080"):
                log.write(cri_log_line(line))
        # ... and it has no volume provisioner; a real cluster's default StorageClass has one.
        settings.update(provide_volumes(kubeconfig))
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
