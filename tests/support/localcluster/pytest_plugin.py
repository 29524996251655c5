"""pytest plugin: the ``kube`` marker and the ``kube_cluster`` / ``kube_api`` fixtures,
``second_kube_cluster`` (a second local control plane beside the first, for many-cluster tests)
and ``image_registry`` (an image registry on loopback, with TLS and a password).

Load it with ``-p localcluster.pytest_plugin`` (with ``tests/support`` on ``pythonpath``).

Options (each also read from the environment):

``--kube-backend={local,kind,existing}`` / ``PANDO_KUBE_BACKEND``
    Where the cluster comes from. Default: ``existing`` if a kubeconfig is named, ``kind`` if
    Docker runs and pytest-kind is installed, else ``local`` (this package's control plane).
``--kubeconfig=PATH`` (alias ``--kube-kubeconfig``) / ``PANDO_KUBECONFIG``
    Admin kubeconfig for the ``existing`` backend. When pytest-kind is installed (it owns
    ``--kubeconfig``, with another meaning) or another plugin took the name, only
    ``--kube-kubeconfig`` is registered.

``--kube-minors=1.36,1.33`` / ``PANDO_K8S_MINORS``
    The Kubernetes minors of the local backend. Default: the newest (the default build) and
    every older minor the control plane builds at (``tools/controlplane/kubernetes-1.N``).
    Tests marked ``every_minor`` run once on each (ids ``k8s1.36``, ``k8s1.33``; on older
    minors on asyncio only); the others only on the newest. The runs on older minors come
    last, so each cluster starts once.
    Other backends run every test once, on whatever they are.

A test that needs a cluster while none can be had fails (at setup) with a message saying how
to get one; it is never skipped.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .backends import (
    BACKENDS,
    ENV_KUBECONFIG,
    BackendUnavailable,
    KubeCluster,
    choose_backend,
    local_backend,
    open_backend,
)
from .binaries import newest_minor, older_minors
from .errors import ClusterError
from .nodes import NodeSpec
from .registry import LocalRegistry

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

MARKER = "kube: the test needs a Kubernetes cluster (fixtures kube_cluster / kube_api)"
REAL_NODE_MARKER = (
    "real_node: the test runs containers on a real node (fixture real_node_cluster); skipped "
    "with the reason where the machine cannot run one, unless PANDO_REAL_NODES=1"
)
EVERY_MINOR_MARKER = (
    "every_minor: the test runs on every Kubernetes minor of --kube-minors (fixture kube_minor)"
)
ENV_MINORS = "PANDO_K8S_MINORS"
_OLDER = pytest.StashKey[list[str]]()
ENV_REAL_NODES = "PANDO_REAL_NODES"
"""``1``: a machine that cannot run a real node fails the real-node tests instead of skipping
them (the test command sets it: on the project's machines they all run)."""
REAL_CONTEXT = "pando-real"
"""Context of :func:`real_node_cluster`."""
TWO_REAL_CONTEXT = "pando-real2"
"""Context of :func:`two_real_nodes_cluster`."""
SECOND_CONTEXT = "pando-local-2"
"""Context (and kubeconfig entry names) of :func:`second_kube_cluster`."""
SMALL_NODES = (NodeSpec("kwok-small-0", "2", "4Gi"), NodeSpec("kwok-small-1", "2", "4Gi"))
"""The second cluster's nodes: half the size of the first's, so placement by room can tell."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--kube-backend`` and ``--kubeconfig`` (alias ``--kube-kubeconfig``)."""
    group = parser.getgroup("kube", "Kubernetes cluster for tests marked 'kube'")
    group.addoption(
        "--kube-backend",
        choices=BACKENDS,
        default=None,
        help="local | kind | existing (env PANDO_KUBE_BACKEND; default: auto)",
    )
    group.addoption(
        "--kube-minors",
        default=None,
        help=f"Kubernetes minors of the local backend, e.g. 1.36,1.33 (env {ENV_MINORS}; "
        "default: every one the control plane builds at)",
    )
    help_text = f"admin kubeconfig for --kube-backend=existing (env {ENV_KUBECONFIG})"
    names = ["--kube-kubeconfig"]
    if importlib.util.find_spec("pytest_kind") is None:  # pytest-kind owns --kubeconfig
        names.append("--kubeconfig")
    try:
        group.addoption(*names, dest="kube_kubeconfig", default=None, help=help_text)
    except (ValueError, argparse.ArgumentError):  # --kubeconfig taken by another plugin
        group.addoption("--kube-kubeconfig", dest="kube_kubeconfig", default=None, help=help_text)


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers; read the older minors to run the ``every_minor`` tests on."""
    config.addinivalue_line("markers", MARKER)
    config.addinivalue_line("markers", REAL_NODE_MARKER)
    config.addinivalue_line("markers", EVERY_MINOR_MARKER)
    config.stash[_OLDER] = _older_minors(config)


def _older_minors(config: pytest.Config) -> list[str]:
    """The older minors of ``--kube-minors`` (none unless the backend is the local one)."""
    wanted = config.getoption("kube_minors", None) or os.environ.get(ENV_MINORS)
    newest, buildable = newest_minor(), older_minors()
    if not wanted:
        minors = [newest, *buildable]
    else:
        minors = [m.strip() for m in wanted.split(",") if m.strip()]
        unknown = [m for m in minors if m != newest and m not in buildable]
        if unknown:
            raise pytest.UsageError(
                f"--kube-minors: no control plane for {', '.join(unknown)} "
                f"(the newest is {newest}; older: {', '.join(buildable) or 'none'})"
            )
    older = [m for m in minors if m != newest]
    if not older:
        return []
    kubeconfig = config.getoption("kube_kubeconfig", None) or os.environ.get(ENV_KUBECONFIG)
    try:
        backend = choose_backend(config.getoption("kube_backend", None), kubeconfig)
    except BackendUnavailable:
        return []  # the kube tests fail at setup and say why
    return older if backend == "local" else []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each ``every_minor`` test on the newest minor and on each older one asked for."""
    older = metafunc.config.stash.get(_OLDER, [])
    if not older or "kube_minor" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("every_minor") is None:
        return
    # ``None`` is the newest: the same cache key as the tests that do not run on every minor,
    # so they all share one session cluster.
    params = [pytest.param(None, id=f"k8s{newest_minor()}")]
    params += [pytest.param(m, id=f"k8s{m}") for m in older]
    metafunc.parametrize("kube_minor", params, indirect=True, scope="session")


def _param(item: pytest.Item, name: str) -> object:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get(name)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the runs on older minors last (stable), so the newest's cluster stops only once.

    On older minors only the asyncio runs are kept: which event loop drives the adapter has
    nothing to do with the server's version, and the CI's time is counted.
    """
    older = [i for i in items if _param(i, "kube_minor") is not None]
    dropped = [i for i in older if _param(i, "anyio_backend") == "trio"]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    kept = [i for i in older if _param(i, "anyio_backend") != "trio"]
    items[:] = [i for i in items if _param(i, "kube_minor") is None] + kept


@pytest.fixture(scope="session")
def kube_minor(request: pytest.FixtureRequest) -> str | None:
    """The Kubernetes minor of :func:`kube_cluster`: ``None`` for the newest (the default
    build), else an older one of ``--kube-minors`` (``every_minor`` tests only)."""
    return getattr(request, "param", None)


@pytest.fixture(scope="session")
def kube_cluster(request: pytest.FixtureRequest, kube_minor: str | None) -> Iterator[KubeCluster]:
    """A Kubernetes cluster for the whole session (see the module docstring for backends);
    on an older minor, one for the ``every_minor`` tests' runs on it."""
    kubeconfig = request.config.getoption("kube_kubeconfig") or os.environ.get(ENV_KUBECONFIG)
    failure = ""
    try:
        name = choose_backend(request.config.getoption("kube_backend"), kubeconfig)
        manager = open_backend(name, kubeconfig, kube_minor)
        cluster = manager.__enter__()
    except (BackendUnavailable, ClusterError) as exc:
        failure = f"no Kubernetes cluster: {exc}"
    if failure:  # outside the except block, so pytest shows the message alone
        pytest.fail(failure, pytrace=False)
    try:
        yield cluster
    finally:
        manager.__exit__(None, None, None)


@pytest.fixture(scope="session")
def second_kube_cluster(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """A second cluster for the session, running at once beside :func:`kube_cluster`.

    Always this package's local control plane (whatever the first's backend), with the nodes
    of :data:`SMALL_NODES` and the context :data:`SECOND_CONTEXT`: its own work directory,
    certificates and ports, so both kubeconfigs merge into one. Tests may stop and restart it
    (``second_kube_cluster.local.stop_components()`` / ``start_components()``); a test that
    stops it starts it again before it ends.
    """
    failure = ""
    try:
        manager = local_backend(SECOND_CONTEXT, SMALL_NODES)
        cluster = manager.__enter__()
    except (BackendUnavailable, ClusterError) as exc:
        failure = f"no second Kubernetes cluster: {exc}"
    if failure:
        pytest.fail(failure, pytrace=False)
    try:
        yield cluster
    finally:
        manager.__exit__(None, None, None)


@pytest.fixture(scope="session")
def real_node_cluster() -> Iterator[KubeCluster]:
    """A local control plane with a real node (containerd, kubelet, kube-proxy, kube-router,
    CoreDNS) beside two kwok nodes, for the session; its own context :data:`REAL_CONTEXT`.

    Pods land on the real node through the RuntimeClass ``pando-real``. Where this machine
    cannot run a node the test is skipped with the reason, or fails when
    ``PANDO_REAL_NODES=1``.
    """
    yield from _real_nodes_cluster(REAL_CONTEXT, 1)


@pytest.fixture(scope="session")
def two_real_nodes_cluster() -> Iterator[KubeCluster]:
    """As :func:`real_node_cluster` with two real nodes, joined by the harness's network
    (each its own namespace, kubelet, containerd and pod range; see
    :mod:`localcluster.realnode.network`), and a heartbeat short enough that a node which
    stops reporting is called lost within half a minute; its own context
    :data:`TWO_REAL_CONTEXT`. Only the tests that need two nodes pay for it.
    """
    yield from _real_nodes_cluster(TWO_REAL_CONTEXT, 2)


def _real_nodes_cluster(context: str, count: int) -> Iterator[KubeCluster]:
    from .realnode.setup import missing  # noqa: PLC0415 - imports the image builder: only here

    absent = missing()
    if absent:
        reason = "no real node on this machine: it lacks " + ", ".join(absent)
        if os.environ.get(ENV_REAL_NODES) == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    failure = ""
    try:
        manager = local_backend(context, real_nodes=count)
        cluster = manager.__enter__()
    except (BackendUnavailable, ClusterError) as exc:
        failure = f"no cluster with {count} real node(s): {exc}"
    if failure:
        pytest.fail(failure, pytrace=False)
    try:
        yield cluster
    finally:
        manager.__exit__(None, None, None)


def ran_and_skipped(terminalreporter: Any, marker: str) -> tuple[int, int]:
    """How many tests marked ``marker`` ran, and how many were skipped, in this session."""
    ran = skipped = 0
    for outcome, reports in terminalreporter.stats.items():
        for report in reports:
            if marker not in getattr(report, "keywords", {}):
                continue
            if outcome == "skipped":
                skipped += 1
            elif getattr(report, "when", "") == "call":
                ran += 1
    return ran, skipped


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how many real-node tests ran (skips are listed with their reasons by ``-ra``)."""
    ran, skipped = ran_and_skipped(terminalreporter, "real_node")
    if ran or skipped:
        terminalreporter.write_line(f"real-node tests: {ran} ran, {skipped} skipped")


@pytest.fixture(scope="session")
def image_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """An image registry for the session: CNCF Distribution on ``127.0.0.1:<port>`` with TLS
    (a CA of its own: ``image_registry.ca_cert``) and a password (``username``, ``password``,
    ``password_file``), storing in a work directory; see :mod:`localcluster.registry`.

    Independent of any cluster. ``image_registry.push(archive, name, tag)`` seeds an image.
    """
    failure = ""
    try:
        registry = LocalRegistry(tmp_path_factory.mktemp("registry")).start()
    except ClusterError as exc:
        failure = f"no image registry: {exc}"
    if failure:
        pytest.fail(failure, pytrace=False)
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture
def kube_api(kube_cluster: KubeCluster) -> Iterator[ApiClient]:
    """An admin ``kubernetes.client.ApiClient`` for the cluster (never the global config)."""
    config: Any = importlib.import_module("kubernetes.config")
    client: Any = config.new_client_from_config(
        config_file=str(kube_cluster.kubeconfig), context=kube_cluster.context
    )
    try:
        yield client
    finally:
        client.close()
