"""Locate the control-plane binaries, building them with ``tools/controlplane/build.sh``.

The directory is either named by ``PANDO_CONTROLPLANE_BIN`` or printed by the build script,
which builds into a per-version cache outside the repository when the binaries are missing.

An older Kubernetes minor (one with a module folder ``tools/controlplane/kubernetes-1.N``)
has its own directory: ``PANDO_CONTROLPLANE_BIN_1_N``, else ``build.sh --minor 1.N``. It
holds the three control-plane programs of that minor and the shared ones (etcd, kwok,
metrics-server), but no kubelet or kube-proxy: the real node runs only on the newest minor.
"""

from __future__ import annotations

import os
import re
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
    node: bool = True
    """Whether it holds the real node's programs (only the newest minor's does)."""

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
        wanted = (*BINARIES, *NODE_BINARIES) if self.node else BINARIES
        absent = [b for b in wanted if not os.access(self.path(b), os.X_OK)]
        documents = (*self.stages, *self.metrics_documents)
        absent += [f"{STAGES_DIR}/{s.name}" for s in documents if not s.is_file()]
        return absent


def repo_root() -> Path:
    """The repository root (this file lives in ``tests/support/localcluster/``)."""
    return Path(__file__).resolve().parents[3]


def build_script() -> Path:
    """Path of the build script that produces the binaries."""
    return repo_root() / "tools" / "controlplane" / "build.sh"


def newest_minor() -> str:
    """The Kubernetes minor of the default build (``tools/controlplane/kubernetes/go.mod``)."""
    go_mod = (repo_root() / "tools" / "controlplane" / "kubernetes" / "go.mod").read_text()
    found = re.search(r"^\s*k8s\.io/kubernetes v1\.(\d+)\.", go_mod, re.MULTILINE)
    if found is None:
        raise BinariesNotFoundError("no k8s.io/kubernetes in tools/controlplane/kubernetes/go.mod")
    return f"1.{found.group(1)}"


def older_minors() -> list[str]:
    """The older minors the control plane builds at (a ``kubernetes-1.N`` module each), newest
    first."""
    folders = (repo_root() / "tools" / "controlplane").glob("kubernetes-1.*/go.mod")
    minors = [p.parent.name.removeprefix("kubernetes-") for p in folders]
    return sorted(minors, key=lambda m: int(m.split(".")[1]), reverse=True)


def env_bin(minor: str) -> str:
    """The variable naming the binaries of an older ``minor`` (``PANDO_CONTROLPLANE_BIN_1_33``)."""
    return f"{ENV_BIN}_{minor.replace('.', '_')}"


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


def find_binaries(
    *, build: bool = True, stream_output: bool = False, minor: str | None = None
) -> Binaries:
    """Return the binaries, building them first if they are missing and ``build`` is true.

    ``stream_output`` lets the build script's progress go to this process's stderr;
    otherwise it is captured and only its tail is shown on failure. ``minor``: an older
    Kubernetes minor's (see :func:`older_minors`); ``None`` or the newest: the default build.
    """
    older = minor is not None and minor != newest_minor()
    if older and minor not in older_minors():
        raise BinariesNotFoundError(
            f"Kubernetes {minor} is not buildable here: no tools/controlplane/kubernetes-{minor}/ "
            f"(the newest is {newest_minor()}, older: {', '.join(older_minors()) or 'none'})"
        )
    variable = env_bin(minor) if older and minor is not None else ENV_BIN
    named = os.environ.get(variable)
    if named:
        found = Binaries(Path(named).expanduser().resolve(), node=not older)
        if absent := found.missing():
            raise BinariesNotFoundError(
                f"{variable}={named} lacks: {', '.join(absent)} "
                "(expected the layout that tools/controlplane/build.sh produces)"
            )
        return found

    script = build_script()
    if not script.is_file():
        raise BinariesNotFoundError(f"build script not found: {script}; set {ENV_BIN}")
    args = ["bash", str(script)] + ([] if build else ["--print-dir"])
    if older:
        args += ["--minor", str(minor)]
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
    found = Binaries(Path(lines[-1]), node=not older)
    if absent := found.missing():
        raise BinariesNotFoundError(f"{found.directory} lacks: {', '.join(absent)}")
    return found
