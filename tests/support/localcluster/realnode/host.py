"""What running real nodes changes on the host, and how it is put back.

Kubelet writes three host-wide sysctls; kubelet and the container runtime make cgroups (all
under one cgroup root of the harness's) and mounts (all under the node's work directory).
:class:`HostChanges` records the sysctls before the node starts and restores them; a run that
crashed leaves a record in :data:`RECORDS_DIR`, so the next start finds the leftovers of a
dead run (its namespaces, processes, mounts and cgroups) and removes them first.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import netns

RECORDS_DIR = Path("/run/pando-realnodes")
CGROUP_FS = Path("/sys/fs/cgroup")
HOST_SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops")
"""Host-wide settings kubelet changes at start (it sets what its checks expect)."""


@dataclass
class HostRecord:
    """One run's changes: enough for another process to undo them."""

    pid: int
    prefix: str
    work_dir: str
    cgroup_root: str
    """The parent of every node's cgroup root."""
    sysctls: dict[str, str] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    """The run's network namespaces (a record of a run that had one node may lack them)."""

    @property
    def path(self) -> Path:
        return RECORDS_DIR / f"{self.prefix.rstrip('-')}.json"

    def save(self) -> None:
        RECORDS_DIR.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(asdict(self), indent=2) + "\n")


def read_sysctl(key: str) -> str:
    """A host-wide sysctl's value (``kernel.panic``)."""
    return Path("/proc/sys", *key.split(".")).read_text().strip()


def write_sysctl(key: str, value: str) -> None:
    """Set a host-wide sysctl back (a failure is ignored: restoring is best effort)."""
    with contextlib.suppress(OSError):
        Path("/proc/sys", *key.split(".")).write_text(value)


def record(prefix: str, work_dir: Path, cgroup_root: str, namespaces: list[str]) -> HostRecord:
    """Save what the host has now, before a node changes it."""
    rec = HostRecord(
        pid=os.getpid(),
        prefix=prefix,
        work_dir=str(work_dir),
        cgroup_root=cgroup_root,
        sysctls={key: read_sysctl(key) for key in HOST_SYSCTLS},
        namespaces=list(namespaces),
    )
    rec.save()
    return rec


def cgroup_dirs(cgroup_root: str) -> list[Path]:
    """The harness's cgroup directory in each v1 hierarchy (that exists on this host)."""
    return [
        h / cgroup_root.strip("/")
        for h in sorted(CGROUP_FS.iterdir())
        if h.is_dir() and not h.is_symlink() and (h / "cgroup.procs").exists()
    ]


def make_cgroup_root(cgroup_root: str) -> None:
    """Create the node's cgroup root (and its parents) in every hierarchy (kubelet requires
    it to exist); a cpuset takes its parent's CPUs and memory nodes."""
    parts = cgroup_root.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        for d in cgroup_dirs("/".join(parts[:depth])):
            if d.exists():
                continue
            d.mkdir()
            if (d.parent / "cpuset.cpus").exists():
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (d / key).write_text((d.parent / key).read_text())


def kill_cgroup_tasks(cgroup_root: str) -> None:
    """SIGKILL every process in the cgroups at or below ``cgroup_root``."""
    for d in cgroup_dirs(cgroup_root):
        for procs in d.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)


def remove_cgroups(cgroup_root: str) -> None:
    """Remove ``cgroup_root`` and the cgroups below it, deepest first, in every hierarchy."""
    for d in cgroup_dirs(cgroup_root):
        if not d.exists():
            continue
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                sub.rmdir()
        with contextlib.suppress(OSError):
            d.rmdir()


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory``, deepest first."""
    root = str(directory).rstrip("/")
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == root or point.startswith(root + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: -p.count("/"))


def unmount_all(directory: Path) -> None:
    """Unmount everything at or below ``directory`` (lazily: a busy mount still goes)."""
    for _ in range(3):
        points = mounts_under(directory)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def undo(rec: HostRecord) -> None:
    """Remove a run's processes, mounts, cgroups and namespaces; restore its sysctls."""
    # A record without namespaces is of a run that named its only node's "<prefix>node".
    spaces = rec.namespaces or [f"{rec.prefix}node", f"{rec.prefix}out"]
    kill_cgroup_tasks(rec.cgroup_root)
    for space in spaces:
        for pid in netns.pids(space) if netns.exists(space) else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    kill_cgroup_tasks(rec.cgroup_root)
    unmount_all(Path(rec.work_dir))
    for space in spaces:
        netns.delete(space)
    remove_cgroups(rec.cgroup_root)
    for key, value in rec.sysctls.items():
        write_sysctl(key, value)
    rec.path.unlink(missing_ok=True)


def clean_leftovers() -> list[str]:
    """Undo the changes of every earlier run whose process is gone; returns their prefixes."""
    cleaned: list[str] = []
    if not RECORDS_DIR.is_dir():
        return cleaned
    for path in sorted(RECORDS_DIR.glob("*.json")):
        try:
            rec = HostRecord(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if Path(f"/proc/{rec.pid}").exists():
            continue  # a run still going (another test session): not ours to clean
        undo(rec)
        cleaned.append(rec.prefix)
    return cleaned
