"""What a running engine changes on the host, recorded so that any process can undo it.

An engine makes two network namespaces, cgroups under a parent of its own in every v1
hierarchy, and a work directory; dockerd raises two host-wide key-quota sysctls when they are
low (``kernel.keys.root_maxkeys`` and ``root_maxbytes``, for its containers' keyrings).
Its mounts (the overlay2 layers, ``/run``, the cgroup hierarchies) live in a private mount
namespace and vanish with its processes; its iptables rules, ``ip_forward`` and bridges live
in its network namespace and vanish with it.

:func:`record` writes a :class:`EngineRecord` to :data:`RECORDS_DIR` before the engine changes
anything; :func:`undo` removes the lot and restores the sysctls; :func:`clean_leftovers` undoes
each record whose test process is gone (a crashed run), as :mod:`localcluster.realnode.host`
does for real nodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from localcluster.process import pid_alive
from localcluster.realnode import host, netns

from .network import EngineNetwork

RECORDS_DIR = Path("/run/pando-docker")
HOST_SYSCTLS = ("kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")
"""Host-wide settings dockerd raises at start (when lower than it wants)."""


@dataclass
class EngineRecord:
    """One engine's changes: enough for another process to undo them."""

    pid: int
    """The test process that runs the engine."""
    started: str
    """That process's start time (``/proc/PID/stat``), so a reused pid is not taken for it."""
    prefix: str
    slot: int
    work_dir: str
    cgroup_parent: str
    sysctls: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        """Where the record is kept."""
        return RECORDS_DIR / f"{self.prefix}d{self.slot}.json"

    @property
    def network(self) -> EngineNetwork:
        """The engine's namespaces."""
        return EngineNetwork(self.prefix, self.slot)

    def live(self) -> bool:
        """Whether the test process that wrote the record still runs."""
        return pid_alive(self.pid) and _start_time(self.pid) == self.started

    def save(self) -> None:
        """Write the record (its folder made if needed)."""
        RECORDS_DIR.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(asdict(self), indent=2) + "\n")


def _start_time(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _records() -> list[EngineRecord]:
    if not RECORDS_DIR.is_dir():
        return []
    return [rec for path in sorted(RECORDS_DIR.glob("*.json")) if (rec := read(path))]


def record(prefix: str, slot: int, work_dir: Path, cgroup_parent: str) -> EngineRecord:
    """Save what the host has now, before an engine changes it.

    While another engine runs, its record holds the host's settings from before any engine
    changed them: those are copied (the current ones are that engine's doing).
    """
    running = [rec for rec in _records() if rec.live()]
    sysctls = (
        dict(running[0].sysctls)
        if running
        else {key: host.read_sysctl(key) for key in HOST_SYSCTLS}
    )
    rec = EngineRecord(
        pid=os.getpid(),
        started=_start_time(os.getpid()),
        prefix=prefix,
        slot=slot,
        work_dir=str(work_dir),
        cgroup_parent=cgroup_parent,
        sysctls=sysctls,
    )
    rec.save()
    return rec


def kill_processes(rec: EngineRecord, *, outside_too: bool = True, timeout: float = 10.0) -> None:
    """SIGKILL whatever is left of an engine: its namespaces' processes and its containers
    (which run in namespaces of their own, but in the engine's cgroups); the stand-in
    server's namespace too unless ``outside_too`` is false. Returns once none is left (a
    killed task leaves its cgroup a moment after the signal), or after ``timeout``."""
    network = rec.network
    spaces = (network.engine, network.outside) if outside_too else (network.engine,)

    def left() -> list[int]:
        found = [p for s in spaces if netns.exists(s) for p in netns.pids(s) if pid_alive(p)]
        return found + _cgroup_tasks(rec.cgroup_parent)

    deadline = time.monotonic() + timeout
    while (pids := left()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _cgroup_tasks(cgroup_parent: str) -> list[int]:
    found: list[int] = []
    for d in host.cgroup_dirs(cgroup_parent):
        for procs in d.rglob("cgroup.procs") if d.exists() else ():
            with contextlib.suppress(OSError):
                found += [int(pid) for pid in procs.read_text().split()]
    return found


def undo(rec: EngineRecord) -> None:
    """Remove an engine's processes, namespaces, cgroups and files; restore its sysctls."""
    kill_processes(rec)
    work_dir = Path(rec.work_dir)
    host.unmount_all(work_dir)  # none expected (the mounts are private): a safety net
    rec.network.delete()
    deadline = time.monotonic() + 5.0
    while any(d.exists() for d in host.cgroup_dirs(rec.cgroup_parent)):
        host.remove_cgroups(rec.cgroup_parent)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    others = [other for other in _records() if other.path != rec.path and other.live()]
    if not others:  # the last engine running puts the host's settings back
        for key, value in rec.sysctls.items():
            if host.read_sysctl(key) != value:
                host.write_sysctl(key, value)
    # overlay2's layers hold files of any owner and mode: remove what can be removed.
    shutil.rmtree(work_dir / "data", ignore_errors=True)
    rec.path.unlink(missing_ok=True)


def read(path: Path) -> EngineRecord | None:
    """The record at ``path`` (None, and the file removed, when it cannot be read)."""
    try:
        return EngineRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        path.unlink(missing_ok=True)
        return None


HOSTS_DIR = RECORDS_DIR / "hosts"
"""Records of the host's namespaces (:mod:`.hostside`): ``<namespace>.json``, pid and start."""


def record_host(namespace: str) -> None:
    """Save that this process makes host namespace ``namespace`` (before it makes it)."""
    HOSTS_DIR.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    data = {"pid": pid, "started": _start_time(pid), "netns": namespace}
    (HOSTS_DIR / f"{namespace}.json").write_text(json.dumps(data) + "\n")


def undo_host(namespace: str) -> None:
    """Remove host namespace ``namespace`` (its links' ends in engines go with it) and its
    record."""
    netns.delete(namespace)
    (HOSTS_DIR / f"{namespace}.json").unlink(missing_ok=True)


def _clean_hosts() -> list[str]:
    cleaned = []
    for path in sorted(HOSTS_DIR.glob("*.json")) if HOSTS_DIR.is_dir() else []:
        try:
            data = json.loads(path.read_text())
            pid, started, namespace = int(data["pid"]), str(data["started"]), str(data["netns"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if pid_alive(pid) and _start_time(pid) == started:
            continue  # a run still going
        undo_host(namespace)
        cleaned.append(namespace)
    return cleaned


def clean_leftovers() -> list[str]:
    """Undo every engine (and host namespace) whose test process is gone; return the
    namespaces' names."""
    cleaned: list[str] = _clean_hosts()
    for rec in _records():
        if rec.live():
            continue  # a run still going (another test session): not ours to clean
        undo(rec)
        cleaned.append(rec.network.engine)
    return cleaned
