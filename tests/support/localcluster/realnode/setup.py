"""Assemble a :class:`RealNode` from what this machine has: the binaries built from Go
modules and the images the harness builds from Debian packages; and say what is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .. import images
from ..binaries import Binaries, go_tool
from .configs import Heartbeat
from .nodeset import RealNodeSet, real_node_name
from .stack import NodeBinaries, NodeImage, RealNode

REAL_NODE_NAME = real_node_name(0)
ENV_KUBE_ROUTER_BIN = "PANDO_KUBE_ROUTER_BIN"
ENV_GVISOR_BIN = "PANDO_GVISOR_BIN"
DEBIAN_COMMANDS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "ip",
                   "iptables", "ipset", "conntrack", "mount", "umount")  # fmt: skip
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")

__all__ = ["REAL_NODE_NAME", "RealNode", "RealNodeSet", "make_real_nodes", "missing"]


def missing() -> list[str]:
    """What this machine lacks to run a real node (empty when it can), in plain words."""
    absent = []
    if os.geteuid() != 0:
        absent.append("root (a node makes namespaces, mounts and cgroups)")
    absent += [f"the command {c}" for c in DEBIAN_COMMANDS if shutil.which(c) is None]
    absent += [f"the CNI plugin {p}" for p in CNI_PLUGINS if not Path("/usr/lib/cni", p).exists()]
    if not Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        absent.append("cgroup v1 hierarchies under /sys/fs/cgroup (the node is set up for them)")
    if not Path("/proc/sys/net/bridge").exists():
        absent.append("br_netfilter (bridged traffic through iptables)")
    return absent


def make_real_nodes(work_dir: Path, binaries: Binaries | None, count: int = 1) -> RealNodeSet:
    """The real nodes of a local cluster, their programs and images found or built first.

    One node keeps Kubernetes' heartbeat defaults; with more, a node that stops reporting is
    called lost sooner (:class:`~.configs.Heartbeat`), so a test can see another take over.
    """
    if binaries is None:
        raise RuntimeError("the control plane's binaries are needed first")
    coredns = images.find_coredns()
    built = images.harness_images(coredns)
    return RealNodeSet(
        work_dir=work_dir,
        count=count,
        binaries=NodeBinaries(
            kubelet=binaries.path("kubelet"),
            kube_proxy=binaries.path("kube-proxy"),
            kube_router=go_tool("kube-router", "kube-router", ENV_KUBE_ROUTER_BIN, timeout=1800),
            runsc=go_tool("gvisor", "runsc", ENV_GVISOR_BIN, timeout=1800),
        ),
        images=[NodeImage(b.name, b.archive) for b in built.values()],
        sandbox_image=built["pause"].name,
        coredns_image=built["coredns"].name,
        heartbeat=Heartbeat() if count > 1 else None,
    )
