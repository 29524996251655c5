"""Locate the control-plane binaries, building them with ``tools/controlplane/build.sh``.

The directory is either named by ``PANDO_CONTROLPLANE_BIN`` or printed by the build script,
which builds into a per-version cache outside the repository when the binaries are missing.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import BinariesNotFoundError

ENV_BIN = "PANDO_CONTROLPLANE_BIN"
"""Environment variable naming a directory that already holds the binaries."""

BINARIES = (  # in start order
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "metrics-server",
)
NODE_BINARIES = ("kubelet", "kube-proxy")
"""Built with the control plane, from the same module: the real node's programs."""
STAGES_DIR = "kwok-stages"
DEFAULT_STAGES = (
    "node-initialize.yaml",
    "node-heartbeat-with-lease.yaml",
    "pod-ready.yaml",
    "pod-complete.yaml",
    "pod-delete.yaml",
)
METRICS_DOCUMENTS = ("metrics-resource.yaml", "usage-from-annotation.yaml")
"""kwok's Metric (a kubelet-like ``/metrics/resource`` per node) and the usage it reports."""


@dataclass(frozen=True)
class Binaries:
    """A directory holding the control-plane binaries, kwok's default stages and metrics."""

    directory: Path

    def path(self, name: str) -> Path:
        """Return the path of the binary ``name`` (one of :data:`BINARIES`)."""
        if name not in BINARIES and name not in NODE_BINARIES:
            raise KeyError(name)
        return self.directory / name

    @property
    def stages(self) -> tuple[Path, ...]:
        """kwok's default stage YAML files, in a fixed order."""
        return tuple(self.directory / STAGES_DIR / s for s in DEFAULT_STAGES)

    @property
    def metrics_documents(self) -> tuple[Path, ...]:
        """kwok's Metric and ClusterResourceUsage documents (what metrics-server scrapes)."""
        return tuple(self.directory / STAGES_DIR / s for s in METRICS_DOCUMENTS)

    def missing(self) -> list[str]:
        """Names of the binaries or stage files that are absent (empty when complete)."""
        absent = [b for b in (*BINARIES, *NODE_BINARIES) if not os.access(self.path(b), os.X_OK)]
        documents = (*self.stages, *self.metrics_documents)
        absent += [f"{STAGES_DIR}/{s.name}" for s in documents if not s.is_file()]
        return absent


def repo_root() -> Path:
    """The repository root (this file lives in ``tests/support/localcluster/``)."""
    return Path(__file__).resolve().parents[3]


def build_script() -> Path:
    """Path of the build script that produces the binaries."""
    return repo_root() / "tools" / "controlplane" / "build.sh"


def go_tool(tool: str, binary: str, env: str, *, timeout: float) -> Path:
    """``binary`` of the Go-built ``tool``: from the directory ``env`` names, else the one
    ``tools/<tool>/build.sh`` builds (or finds in its cache) and prints last."""
    named = os.environ.get(env)
    if named:
        found = Path(named).expanduser() / binary
        if not os.access(found, os.X_OK):
            raise BinariesNotFoundError(f"{env}={named} holds no executable {binary}")
        return found
    script = repo_root() / "tools" / tool / "build.sh"
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, check=False, timeout=timeout
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.splitlines()[-20:])
        raise BinariesNotFoundError(f"{script} failed ({proc.returncode}):\n{tail}")
    found = Path(lines[-1]) / binary
    if not os.access(found, os.X_OK):
        raise BinariesNotFoundError(f"{script} printed {found.parent}, which holds no {binary}")
    return found


def find_binaries(*, build: bool = True, stream_output: bool = False) -> Binaries:
    """Return the binaries, building them first if they are missing and ``build`` is true.

    ``stream_output`` lets the build script's progress go to this process's stderr;
    otherwise it is captured and only its tail is shown on failure.
    """
    named = os.environ.get(ENV_BIN)
    if named:
        found = Binaries(Path(named).expanduser().resolve())
        if absent := found.missing():
            raise BinariesNotFoundError(
                f"{ENV_BIN}={named} lacks: {', '.join(absent)} "
                "(expected the layout that tools/controlplane/build.sh produces)"
            )
        return found

    script = build_script()
    if not script.is_file():
        raise BinariesNotFoundError(f"build script not found: {script}; set {ENV_BIN}")
    args = ["bash", str(script)] + ([] if build else ["--print-dir"])
    proc = subprocess.run(
        args,
        stdout=subprocess.PIPE,
        stderr=None if stream_output else subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or "").splitlines()[-30:])
        raise BinariesNotFoundError(
            f"{script} failed with exit code {proc.returncode}"
            + (f":\n{tail}" if tail else " (see its output above)")
        )
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise BinariesNotFoundError(f"{script} printed no directory")
    found = Binaries(Path(lines[-1]))
    if absent := found.missing():
        raise BinariesNotFoundError(f"{found.directory} lacks: {', '.join(absent)}")
    return found
