"""Cutting a real node off, and what its own container runtime runs.

A node is cut off as a machine that drops off the network is: its kubelet stops (SIGSTOP: it
neither reports nor acts, and resumes where it was) and its link to the other nodes and the
outside goes down. Its containers keep running, as they do on a real machine the control plane
no longer hears from. :func:`running_containers` asks the node's containerd itself, not the API
server, which cannot see a node that does not report.
"""

from __future__ import annotations

import subprocess

from .nodeset import RealNodeSet
from .stack import RealNode

__all__ = ["cut_off", "reconnect", "running_containers"]


def cut_off(nodes: RealNodeSet, index: int) -> None:
    """Node ``index`` stops reporting (its kubelet stopped) and loses its link."""
    nodes.nodes[index].components["kubelet"].pause()
    nodes.network.set_link(index, up=False)


def reconnect(nodes: RealNodeSet, index: int) -> None:
    """Undo :func:`cut_off`: the link comes back up and the kubelet carries on."""
    nodes.network.set_link(index, up=True)
    nodes.nodes[index].components["kubelet"].resume()


def running_containers(node: RealNode, namespace: str = "", container: str = "") -> set[str]:
    """The ids of the containers (pod sandboxes included) the node's containerd runs now;
    only those of pods in ``namespace`` named ``container``, when given (by the labels the
    CRI puts on each, so a container whose pod the API server no longer has is counted too)."""
    running = _ctr(node, "tasks", "ls")
    rows = (line.split() for line in running.splitlines()[1:])  # TASK  PID  STATUS
    ids = {row[0] for row in rows if len(row) >= 3 and row[2] == "RUNNING"}
    if not (namespace or container):
        return ids
    labels = []
    if namespace:
        labels.append(f'labels."io.kubernetes.pod.namespace"=="{namespace}"')
    if container:
        labels.append(f'labels."io.kubernetes.container.name"=="{container}"')
    listed = _ctr(node, "containers", "ls", ",".join(labels))
    return ids & {line.split()[0] for line in listed.splitlines()[1:] if line.strip()}


def _ctr(node: RealNode, *args: str) -> str:
    argv = ["ctr", "--address", str(node.dirs.containerd_socket), "--namespace", "k8s.io", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc.stdout
