"""Where the tests' Kubernetes cluster comes from: ``local``, ``kind`` or ``existing``.

Each backend is a context manager yielding a :class:`KubeCluster`. A backend that cannot work
on this machine raises :class:`BackendUnavailable` with a message saying how to get one.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cluster import CONTEXT, LocalCluster
from .errors import ClusterError
from .nodes import DEFAULT_NODES, NodeSpec, Taint

BACKENDS = ("local", "kind", "existing")
ENV_BACKEND = "PANDO_KUBE_BACKEND"
ENV_KUBECONFIG = "PANDO_KUBECONFIG"

HOW_TO_GET_ONE = """\
Tests marked 'kube' need a Kubernetes cluster. Ways to get one:
  * local (default without Docker): install Go >= 1.26 and let tools/controlplane/build.sh build
    the control plane (needs the Go module proxy; ~11 min the first time), or point
    PANDO_CONTROLPLANE_BIN at a directory holding etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler, kwok, metrics-server and kwok-stages/ (the build script's layout); needs the
    openssl command.
  * existing: --kube-backend=existing --kubeconfig=PATH (or PANDO_KUBE_BACKEND=existing and
    PANDO_KUBECONFIG=PATH) for any cluster you can reach.
  * kind: --kube-backend=kind with a running Docker daemon and the pytest-kind package.
Or deselect these tests with -m 'not kube'."""


class BackendUnavailable(ClusterError):
    """The chosen backend cannot provide a cluster here."""


class UnsupportedByBackend(ClusterError):
    """The operation (e.g. adding a node) is not possible with this backend."""


AddNode = Callable[..., object]


@dataclass(frozen=True)
class KubeCluster:
    """What the ``kube_cluster`` fixture yields."""

    backend: str
    """``local``, ``kind`` or ``existing``."""
    kubeconfig: Path
    """Admin kubeconfig."""
    restricted_kubeconfig: Path | None = None
    """Kubeconfig of an identity with no permissions until a test grants some (local only)."""
    restricted_user: str | None = None
    """User name of :attr:`restricted_kubeconfig` (for RoleBinding subjects)."""
    context: str | None = None
    """Context to use in :attr:`kubeconfig` (None: its current context)."""
    logs_file: Path | None = None
    """CRI-format file served as every fake pod's log; tests may append lines (local only)."""
    local: LocalCluster | None = field(default=None, repr=False, compare=False)
    """The harness object, for the ``local`` backend."""
    _add_node: AddNode | None = field(default=None, repr=False, compare=False)

    def add_node(
        self,
        name: str,
        cpu: str | int = "4",
        memory: str = "8Gi",
        *,
        pods: int = 110,
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Taint] | None = None,
    ) -> None:
        """Add a Ready node of the given size; raises :class:`UnsupportedByBackend` if the
        backend cannot (only ``local``, which simulates nodes with kwok, can)."""
        if self._add_node is None:
            raise UnsupportedByBackend(
                f"add_node() needs simulated nodes; the {self.backend!r} backend has real ones. "
                "Use --kube-backend=local, or skip this test for other backends."
            )
        self._add_node(name, cpu, memory, pods=pods, labels=labels, taints=taints)


def docker_available() -> bool:
    """Whether a Docker daemon answers (``docker info`` succeeds within 10 s)."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        return (
            subprocess.run(
                [docker, "info"], capture_output=True, timeout=10, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose_backend(option: str | None, kubeconfig: str | None) -> str:
    """The backend to use: the option/env value, else ``existing`` when a kubeconfig was
    named, else ``kind`` when Docker runs and pytest-kind is installed, else ``local``."""
    name = option or os.environ.get(ENV_BACKEND) or ""
    if name:
        if name not in BACKENDS:
            raise BackendUnavailable(f"unknown backend {name!r}; choose one of {BACKENDS}")
        return name
    if kubeconfig:
        return "existing"
    if docker_available():
        return "kind" if importlib.util.find_spec("pytest_kind") is not None else "local"
    return "local"


@contextmanager
def local_backend(
    name: str = CONTEXT,
    nodes: Sequence[NodeSpec] = DEFAULT_NODES,
    *,
    real_node: bool = False,
    minor: str | None = None,
    real_nodes: int = 0,
) -> Iterator[KubeCluster]:
    """The harness of this package: a real control plane with kwok nodes.

    ``name``: its context (and kubeconfig entries); several run at once under distinct names.
    ``real_node``: a real node beside the kwok ones (:mod:`localcluster.realnode`);
    ``real_nodes``: that many (joined by the harness's network).
    ``minor``: an older Kubernetes minor's control plane (``None``: the newest).
    """
    try:
        cluster = LocalCluster(
            name=name, nodes=nodes, real_node=real_node, real_nodes=real_nodes, minor=minor
        ).start()
    except ClusterError as exc:
        raise BackendUnavailable(f"local backend failed: {exc}\n\n{HOW_TO_GET_ONE}") from exc
    try:
        yield KubeCluster(
            backend="local",
            kubeconfig=cluster.kubeconfig,
            restricted_kubeconfig=cluster.restricted_kubeconfig,
            restricted_user=cluster.restricted_user,
            context=cluster.context,
            logs_file=cluster.logs_file,
            local=cluster,
            _add_node=cluster.add_node,
        )
    finally:
        cluster.stop()


@contextmanager
def existing_backend(kubeconfig: str | None) -> Iterator[KubeCluster]:
    """A cluster someone else runs, named by its admin kubeconfig."""
    if not kubeconfig:
        raise BackendUnavailable(f"the existing backend needs --kubeconfig or {ENV_KUBECONFIG}")
    path = Path(kubeconfig).expanduser()
    if not path.is_file():
        raise BackendUnavailable(f"kubeconfig not found: {path}\n\n{HOW_TO_GET_ONE}")
    yield KubeCluster(backend="existing", kubeconfig=path.resolve())


@contextmanager
def kind_backend(name: str = "pando-test") -> Iterator[KubeCluster]:
    """A kind cluster through pytest-kind's ``KindCluster`` (needs Docker; untested here)."""
    try:
        pytest_kind: Any = importlib.import_module("pytest_kind")
    except ImportError as exc:
        raise BackendUnavailable(f"pytest-kind is not installed\n\n{HOW_TO_GET_ONE}") from exc
    if not docker_available():
        raise BackendUnavailable(f"no Docker daemon answers\n\n{HOW_TO_GET_ONE}")
    cluster: Any = pytest_kind.KindCluster(name)
    cluster.create()
    try:
        yield KubeCluster(
            backend="kind", kubeconfig=Path(cluster.kubeconfig_path), context=f"kind-{name}"
        )
    finally:
        cluster.delete()


def open_backend(
    name: str, kubeconfig: str | None, minor: str | None = None
) -> AbstractContextManager[KubeCluster]:
    """The context manager of backend ``name`` (``minor``: the local backend's Kubernetes)."""
    if name == "local":
        return local_backend(minor=minor)
    if name == "existing":
        return existing_backend(kubeconfig)
    if name == "kind":
        return kind_backend()
    raise BackendUnavailable(f"unknown backend {name!r}; choose one of {BACKENDS}")
