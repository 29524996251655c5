"""What a machine needs to run the harness's Docker Engine, in plain words."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

COMMANDS = ("dockerd", "containerd", "runc", "nsenter", "unshare", "ip", "iptables", "mount",
            "busybox")  # fmt: skip
"""dockerd (``docker.io``) starts containerd and runc itself; the rest set up namespaces."""


def missing() -> list[str]:
    """What this machine lacks to run an engine (empty when it can)."""
    absent = []
    if os.geteuid() != 0:
        absent.append("root (the engine makes namespaces, mounts and cgroups)")
    absent += [f"the command {c} (tools/debian/install.sh)" for c in COMMANDS
               if shutil.which(c) is None]  # fmt: skip
    if not Path("/etc/docker").is_dir():
        absent.append("the folder /etc/docker (docker.io makes it; the engine binds its own on it)")
    if not Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        absent.append("cgroup v1 hierarchies under /sys/fs/cgroup (the engine is set up for them)")
    return absent
