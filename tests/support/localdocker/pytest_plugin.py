"""pytest plugin: the ``docker`` marker and the ``docker_engine`` fixture, a real Docker
Engine for the session (see :class:`localdocker.DockerEngine`), started when a test first
asks for it and stopped, every change undone, at the session's end.

Load it with ``-p localdocker.pytest_plugin`` (with ``tests/support`` on ``pythonpath``).

``--docker-engines=20.10,28.5`` / ``PANDO_DOCKER_ENGINES``
    The engine releases to run (:mod:`localdocker.engines`: Debian's 20.10, the built 28.5;
    default: ``28.5,20.10``). Every Docker test runs on the first; the second engine of a fleet
    (``second_docker_engine``) is of the second; tests marked ``every_engine`` run on each other
    one too (ids ``docker20.10``, ``docker28.5``; there on asyncio only), last, so
    each engine starts once.

Where this machine cannot run the engine (not root, ``docker.io`` not installed...), a test
that asks for it is skipped with the reason, unless ``PANDO_DOCKER=1`` or
``PANDO_REAL_NODES=1`` (the test command's CI sets it) is set: then it fails. A failure to
start always fails, with the daemon's log.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from localcluster.pytest_plugin import ran_and_skipped

from .api import DockerApiError
from .engine import DockerEngine, EngineError
from .engines import binaries, versions
from .gvisor import RUNSC, RUNSC_ARGS, runsc_binary
from .hostside import HostNamespace
from .requirements import missing
from .sshd import EngineSshd, SshdError
from .sshd import missing as sshd_missing

MARKER = (
    "docker: the test runs on a real Docker Engine (fixture docker_engine); skipped with the "
    "reason where the machine cannot run one, unless PANDO_DOCKER=1 or PANDO_REAL_NODES=1"
)
EVERY_ENGINE_MARKER = (
    "every_engine: the test runs on every Docker Engine of --docker-engines "
    "(fixture docker_engine_version)"
)
ENV_ENGINES = "PANDO_DOCKER_ENGINES"
ENV_DOCKER = "PANDO_DOCKER"
"""``1``: a machine that cannot run the engine fails the Docker tests instead of skipping."""
ENV_REAL_NODES = "PANDO_REAL_NODES"
"""``1`` implies :data:`ENV_DOCKER` (machines that run real nodes run the engine too)."""
_ENGINES = pytest.StashKey[list[DockerEngine]]()
_SSHDS = pytest.StashKey[list[EngineSshd]]()
_NO_RUNSC = pytest.StashKey[str]()
_RELEASES = pytest.StashKey[list[str]]()


def required() -> bool:
    """Whether the engine must run here (an unfit machine fails instead of skipping)."""
    return "1" in (os.environ.get(ENV_DOCKER), os.environ.get(ENV_REAL_NODES))


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--docker-engines``."""
    parser.getgroup("docker", "Docker Engines for tests marked 'docker'").addoption(
        "--docker-engines",
        default=None,
        help=f"engine releases, the first for every test, e.g. {','.join(versions())} "
        f"(env {ENV_ENGINES}; default: every one the harness runs)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers; read the engine releases to run."""
    config.addinivalue_line("markers", MARKER)
    config.addinivalue_line("markers", EVERY_ENGINE_MARKER)
    config.stash[_ENGINES] = []
    config.stash[_SSHDS] = []
    config.stash[_RELEASES] = _releases(config)


def _releases(config: pytest.Config) -> list[str]:
    """The releases of ``--docker-engines``: the first runs every test."""
    wanted = config.getoption("docker_engines", None) or os.environ.get(ENV_ENGINES)
    if not wanted:
        return list(reversed(versions()))  # the newest, the one users run, for every test
    releases = [r.strip() for r in wanted.split(",") if r.strip()]
    unknown = [r for r in releases if r not in versions()]
    if unknown or not releases:
        raise pytest.UsageError(
            f"--docker-engines: no engine {', '.join(unknown) or '(none named)'} "
            f"(the harness runs {', '.join(versions())})"
        )
    return releases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each ``every_engine`` test on the first release and on each other one asked for."""
    if metafunc.definition.get_closest_marker("every_engine") is None:
        return
    if "docker_engine_version" not in metafunc.fixturenames:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid} is marked every_engine but uses no engine "
            "(fixture docker_engine_version)"
        )
    first, *others = metafunc.config.stash[_RELEASES]
    if not others:
        return
    # ``None`` is the first: the cache key of the tests that are not marked, so they all share
    # one session engine.
    params = [pytest.param(None, id=f"docker{first}")]
    params += [pytest.param(r, id=f"docker{r}") for r in others]
    metafunc.parametrize("docker_engine_version", params, indirect=True, scope="session")


def releases(config: pytest.Config) -> list[str]:
    """The releases this run asked for (``--docker-engines``), the first first."""
    found: list[str] = config.stash[_RELEASES]
    return list(found)


def _param(item: pytest.Item, name: str) -> object:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get(name)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses the engine ``docker`` (for ``-m docker`` and the summary);
    move the runs on other releases last (stable), so each engine starts once.

    On other releases only the asyncio runs are kept: which event loop drives the adapter has
    nothing to do with the engine's release, and the CI's time is counted.
    """
    for item in items:
        if "docker_engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
    others = [i for i in items if _param(i, "docker_engine_version") is not None]
    dropped = [i for i in others if _param(i, "anyio_backend") == "trio"]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    kept = [i for i in others if _param(i, "anyio_backend") != "trio"]
    items[:] = [i for i in items if _param(i, "docker_engine_version") is None] + kept


@pytest.fixture(scope="session")
def docker_engine_version(request: pytest.FixtureRequest) -> str:
    """The release of :func:`docker_engine` (``20.10``, ``28.5``): the first of
    ``--docker-engines``, or another one of them for ``every_engine`` tests."""
    param = getattr(request, "param", None)
    return str(param) if param is not None else request.config.stash[_RELEASES][0]


def refuse(absent: list[str], what: str = "no Docker Engine") -> NoReturn:
    """Skip the test for what the machine lacks, or fail it where the engine is required."""
    reason = f"{what} on this machine: it lacks " + ", ".join(absent)
    if required():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def open_engine(
    request: pytest.FixtureRequest,
    name: str,
    *,
    tls: bool = False,
    runtimes: dict[str, tuple[Path, tuple[str, ...]]] | None = None,
    daemon_flags: tuple[str, ...] = (),
    release: str | None = None,
    features: dict[str, bool] | None = None,
) -> DockerEngine:
    """Start an engine (of ``release``; default: Debian's) in a fresh temporary folder, or
    skip / fail saying why (``daemon_flags``: more dockerd flags, such as
    ``--iptables=false``; ``features``: the daemon configuration's, such as
    ``{"containerd-snapshotter": True}``)."""
    absent = missing()
    if absent:
        refuse(absent)
    try:
        engine_binaries = binaries(release) if release is not None else None
    except FileNotFoundError as exc:
        refuse([f"the Docker Engine {release} ({exc})"])
    failure = ""
    work_dir = request.getfixturevalue("tmp_path_factory").mktemp(name)
    try:
        engine = DockerEngine(
            work_dir,
            tls=tls,
            runtimes=runtimes,
            daemon_flags=daemon_flags,
            features=features,
            binaries=engine_binaries,
        ).open()
    except (EngineError, DockerApiError, OSError, RuntimeError) as exc:
        failure = f"the Docker Engine did not start: {exc}"
    if failure:  # outside the except block, so pytest shows the message alone
        pytest.fail(failure, pytrace=False)
    request.config.stash[_ENGINES].append(engine)
    return engine


@pytest.fixture(scope="session")
def docker_engine(
    request: pytest.FixtureRequest, docker_engine_version: str
) -> Iterator[DockerEngine]:
    """A Docker Engine for the session (of :func:`docker_engine_version`): ``.socket_path``,
    ``.base_url``, ``.api``, ``.images``, ``.outside``, ``.netns``, ``.docker(...)``,
    ``.restart()``...; served over TLS too (``.tls``: on ``127.0.0.1:2376`` of its namespace,
    client certificates required).

    gVisor's ``runsc`` is one of its OCI runtimes beside runc when this machine has it
    (:func:`gvisor_runtime` says so, or why not); :func:`second_docker_engine` has runc alone.

    A test that stops or kills the daemon starts it again before it ends
    (``docker_engine.start()``); one that makes containers, networks or volumes removes them.
    """
    runtimes = {}
    if not missing():
        try:
            runtimes[RUNSC] = (runsc_binary(), RUNSC_ARGS)
        except (FileNotFoundError, OSError, subprocess.SubprocessError) as exc:
            request.config.stash[_NO_RUNSC] = str(exc)
    engine = open_engine(
        request, f"docker{docker_engine_version}", tls=True, runtimes=runtimes,
        release=docker_engine_version,
    )  # fmt: skip
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="session")
def gvisor_runtime(request: pytest.FixtureRequest, docker_engine: DockerEngine) -> str:
    """The name :func:`docker_engine` runs gVisor's ``runsc`` under (``runsc``); skipped
    (failed under ``PANDO_DOCKER=1`` or ``PANDO_REAL_NODES=1``) where it could not be had."""
    if RUNSC not in docker_engine.runtimes:
        why = request.config.stash.get(_NO_RUNSC, "runsc (tools/gvisor/build.sh)")
        refuse([f"gVisor's runsc ({why})"], "no sandboxed runtime")
    return RUNSC


@pytest.fixture(scope="session")
def second_docker_engine(
    request: pytest.FixtureRequest, docker_engine: DockerEngine
) -> Iterator[DockerEngine]:
    """A second engine beside :func:`docker_engine`: its own namespaces, socket and ranges;
    served over TLS too, with a CA of its own. Of the second release asked for (a fleet of two
    engines is then one of each release), else of :func:`docker_engine`'s."""
    asked = releases(request.config)
    release = asked[1] if len(asked) > 1 else docker_engine.binaries.version
    engine = open_engine(request, f"docker{release}-2", tls=True, release=release)
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="session")
def host_namespace(docker_engine: DockerEngine) -> Iterator[HostNamespace]:
    """The host's side of engines on other machines: a namespace of its own, linked to an
    engine by ``host_namespace.link(engine)`` (the engine's address from there), with no
    route to any engine's bridges or containers; ``host_namespace.run(fn)`` runs code
    inside."""
    host = HostNamespace().open()
    try:
        yield host
    finally:
        host.close()


@pytest.fixture(scope="session")
def engine_sshd(
    request: pytest.FixtureRequest, docker_engine: DockerEngine
) -> Iterator[EngineSshd]:
    """Debian's sshd in :func:`docker_engine`'s namespace (``127.0.0.1:22`` there): root logs
    in with ``.client_key``; ``.host_public_key`` is what a client pins (:mod:`.sshd`).

    A test that kills it starts it again before it ends (``engine_sshd.start()``).
    """
    absent = sshd_missing()
    if absent:
        refuse(absent)
    work_dir = request.getfixturevalue("tmp_path_factory").mktemp("sshd")
    try:
        sshd = EngineSshd(docker_engine.netns, work_dir).open()
    except (SshdError, OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"sshd did not start: {exc}", pytrace=False)
    request.config.stash[_SSHDS].append(sshd)
    try:
        yield sshd
    finally:
        sshd.close()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Start again a session engine's daemon a test left stopped (one that failed between
    its ``kill()`` and its ``start()``), so the tests after it do not fail in a row."""
    for engine in item.config.stash.get(_ENGINES, []):
        if engine.is_open and not engine.daemon_running:
            engine.start()
    for sshd in item.config.stash.get(_SSHDS, []):
        if sshd.is_open and not sshd.running:
            sshd.start()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Say how many Docker tests ran, and how long the engines took to start."""
    ran, skipped = ran_and_skipped(terminalreporter, "docker")
    if ran or skipped:
        terminalreporter.write_line(f"docker tests: {ran} ran, {skipped} skipped")
    for engine in config.stash.get(_ENGINES, []):
        figures = ", ".join(f"{k} {v:.2f} s" for k, v in engine.timings.items())
        terminalreporter.write_line(
            f"docker engine {engine.binaries.version} {engine.netns}: {figures}"
        )
