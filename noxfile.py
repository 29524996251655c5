"""Development sessions: tests on asyncio and trio, lint, type checks, docs, benchmarks.

nox -s tests        # the whole suite (builds the local control plane when missing)
nox -s lint typecheck docs
nox -s benchmarks   # prints figures; never asserts timings
nox -s kube_scale   # 1,000 to 10,000 apps on the local control plane (many minutes)
nox -s kube_replicas   # several host replicas: failover, leases at rest, throughput (minutes)
nox -s downstream_adapters   # each adapter's own suite against this core
nox -s docker_apps   # 10, 100 and 500 apps on the tests' Docker Engine (as root; minutes)
nox -s docker_fleet  # two Docker Engines as one fleet: placement, observe, a stop (as root)
nox -s docker_sandbox  # runc against gVisor's runsc on the tests' Docker Engine (as root)
nox -s docker_agent  # what the Docker agent costs a host's connection (as root; seconds)
nox -s lease_stores  # each lease store: latency, calls at rest and per renewal, takeover, a
                    # fleet's first deploy with and without its placement record
nox -s docker_replicas  # three replica processes, 300 apps, two Docker Engines, each store
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "typecheck", "tests"]

ROOT = Path(__file__).parent
ADAPTERS = sorted(str(p.parent) for p in ROOT.glob("adapters/*/pyproject.toml"))
SLOW_BENCHMARKS = {
    "kube_scale.py",
    "kube_real_node.py",
    "kube_neighbours.py",
    "kube_two_nodes.py",
    "kube_sandboxed.py",
    "kube_replicas.py",
    "docker_apps.py",
    "docker_fleet.py",
    "docker_replicas.py",
    "sandboxed_apps.py",
    "agent_dial.py",
}
"""Run by their own session, not by ``benchmarks``."""
EXAMPLE_DISTS = sorted(str(p.parent) for p in ROOT.glob("examples/*/pyproject.toml"))
COMPAT_DISTS = sorted(str(p.parent) for p in ROOT.glob("tests/compat/*/pyproject.toml"))
"""The frozen plugins of earlier adapter API versions the suite runs (never built or released)."""


def _install(session: nox.Session, *groups: str) -> None:
    session.install("pip>=25.1")
    editable = [
        arg for dist in [".", *ADAPTERS, *EXAMPLE_DISTS, *COMPAT_DISTS] for arg in ("-e", dist)
    ]
    group_args = [arg for group in groups for arg in ("--group", f"pyproject.toml:{group}")]
    session.install(*editable, *group_args)


def _control_plane_bin() -> str:
    out = subprocess.run(
        [str(ROOT / "tools/controlplane/build.sh")], check=True, capture_output=True, text=True
    ).stdout
    return out.strip().splitlines()[-1]


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """The whole suite, on asyncio and trio, with the local control plane."""
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    session.run("pytest", *session.posargs, env=env)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff, for lint and format; the import contract (layers, no circles) of pyproject.toml."""
    session.install("ruff>=0.8", "import-linter>=2.1")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "pando_runtime", "adapters", "examples")
    # import-linter reads the packages' imports: they must be importable in the session.
    session.install(
        "-e", ".", "-e", "adapters/kubernetes", "-e", "adapters/consul", "-e", "adapters/docker"
    )
    session.run("lint-imports")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the core, every adapter, the test support packages and the benchmarks."""
    _install(session, "typecheck")
    session.run("mypy")


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Build the docs with warnings as errors, and run their examples."""
    _install(session, "test", "docs")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"))


@nox.session(python="3.11")
def benchmarks(session: nox.Session) -> None:
    """Print benchmark figures: the fake's lifecycle rate, import time, catalog sync into
    Consul, the test Docker Engine's start, the adapter on each engine release, Kubernetes API
    calls and start-up."""
    _install(session, "test")
    session.run("python", "benchmarks/fake_lifecycle.py", *session.posargs)
    session.run("python", "benchmarks/catalog_sync.py")  # starts Consul (tools/consul/build.sh)
    session.run("python", "benchmarks/docker_engine.py")  # the tests' Docker Engine (as root)
    session.run("python", "benchmarks/hung_member.py")  # a fleet beside a frozen dockerd (root)
    session.run("python", "benchmarks/docker_engines.py")  # 20.10 and 28.5 side by side (root)
    for script in sorted(ROOT.glob("adapters/*/benchmarks/*.py")):
        if script.name in SLOW_BENCHMARKS or script.name.startswith("_"):
            continue  # slow (a session of its own), or a part of another benchmark
        env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
        session.run("python", str(script), env=env)


@nox.session(python="3.11")
def faults(session: nox.Session) -> None:
    """The fault report: API server and etcd killed, watches cut, latency and hangs, 429s.

    nox -s faults -- --rounds 10 --apps 20    (any option of the script)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    session.run("python", "benchmarks/faults.py", *session.posargs, env=env)


@nox.session(python="3.11")
def kube_startup(session: nox.Session) -> None:
    """A host's start on Kubernetes: the adapter's import against the client's, and the CLI's
    observe on the local control plane against the fake's (also run by ``benchmarks``).

    nox -s kube_startup -- --runs 11 --cli-runs 7    (any option of the script)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    script = ROOT / "adapters/kubernetes/benchmarks/kube_startup.py"
    session.run("python", str(script), *session.posargs, env=env)


@nox.session(python="3.11")
def kube_warm(session: nox.Session) -> None:
    """Warm starts against cold ones after restarts with churn (the default is a short run).

    nox -s kube_warm -- --apps 10000 --churn-rate 0.5 --downs 5,60,300    (minutes)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    script = ROOT / "adapters/kubernetes/benchmarks/kube_warm.py"
    session.run("python", str(script), *session.posargs, env=env)


@nox.session(python="3.11")
def kube_real_node(session: nox.Session) -> None:
    """Apps on a real node (containerd, runc, kubelet): apply to running, pods per second, the
    node's CPU and memory, the first pod after its start (about two minutes; needs root).

    nox -s kube_real_node -- --apps 20 --batch 60 --cpu-millis 10    (any option of the script)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    script = ROOT / "adapters/kubernetes/benchmarks/kube_real_node.py"
    session.run("python", str(script), *session.posargs, env=env)


@nox.session(python="3.11")
def kube_two_nodes(session: nox.Session) -> None:
    """Two real nodes: pods per second on two nodes against one; a node cut off, observed lost,
    the app applied again and running on the other (a few minutes; needs root).

    nox -s kube_two_nodes -- --apps 20 --rounds 3    (any option of the script)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    script = ROOT / "adapters/kubernetes/benchmarks/kube_two_nodes.py"
    session.run("python", str(script), *session.posargs, env=env)


@nox.session(python="3.11")
def kube_sandboxed(session: nox.Session) -> None:
    """Sandboxed (gVisor) against ordinary (runc) apps on the real node: apply to running, pod
    memory, HTTP latency (a few minutes; needs root).

    nox -s kube_sandboxed -- --apps 5 --requests 200    (any option of the script)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    script = ROOT / "adapters/kubernetes/benchmarks/kube_sandboxed.py"
    session.run("python", str(script), *session.posargs, env=env)


@nox.session(python="3.11")
def kube_neighbours(session: nox.Session) -> None:
    """A neighbour app's answers beside a CPU hog and a fork bomb on the real node (minutes;
    needs root).

    nox -s kube_neighbours -- --requests 200 --hog-millis 500    (any option of the script)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    script = ROOT / "adapters/kubernetes/benchmarks/kube_neighbours.py"
    session.run("python", str(script), *session.posargs, env=env)


@nox.session(python="3.11")
def kube_scale(session: nox.Session) -> None:
    """The Kubernetes adapter with 1,000, 5,000 and 10,000 apps beside the naive way (minutes).

    nox -s kube_scale -- --apps 1000 --profile    (any option of the script)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    script = ROOT / "adapters/kubernetes/benchmarks/kube_scale.py"
    session.run("python", str(script), *session.posargs, env=env)


@nox.session(python="3.11")
def kube_replicas(session: nox.Session) -> None:
    """Several host replicas (issue 23): failover p50/p99 over 20 SIGKILLs, Lease calls at rest,
    first-apply throughput of 1, 2 and 3 replicas over 1,000 apps (about 15 minutes).

    nox -s kube_replicas -- --apps 20 --kills 2 --default-kills 0 --failover-apps 6
        --rest-seconds 4    (a smoke run: about 3 minutes)
    """
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    script = ROOT / "adapters/kubernetes/benchmarks/kube_replicas.py"
    session.run("python", str(script), *session.posargs, env=env)


@nox.session(python="3.11")
def docker_apps(session: nox.Session) -> None:
    """The Docker adapter with 10, 100 and 500 apps on the tests' Docker Engine: calls and
    seconds per first apply, re-apply, observe (beside the naive list and inspect), destroy;
    apply to running and events' latency, p50/p99 (as root, with docker.io; about 30 minutes).

    nox -s docker_apps -- --apps 10,100 --host unix:///var/run/docker.sock   (any option)
    """
    _install(session, "test")
    script = ROOT / "adapters/docker/benchmarks/docker_apps.py"
    session.run("python", str(script), *session.posargs)


@nox.session(python="3.11")
def docker_fleet(session: nox.Session) -> None:
    """A fleet of two of the tests' Docker Engines: 200 first applies at once, an observe of
    2 x 250 apps (calls, beside the naive way), an engine stopped and started (as root, with
    docker.io; minutes).

    nox -s docker_fleet -- --apps 100 --burst 100   (any option)
    """
    _install(session, "test")
    script = ROOT / "adapters/docker/benchmarks/docker_fleet.py"
    session.run("python", str(script), *session.posargs)


@nox.session(python="3.11")
def docker_sandbox(session: nox.Session) -> None:
    """Sandboxed apps against ordinary ones on one of the tests' Docker Engines: apply to
    running, an HTTP request's p50/p99, memory per app, runc against gVisor's runsc (as root,
    with docker.io; runsc from $PANDO_GVISOR_BIN or tools/gvisor/build.sh; about a minute).

    nox -s docker_sandbox -- --apps 20 --requests 1000   (any option)
    """
    _install(session, "test")
    script = ROOT / "adapters/docker/benchmarks/sandboxed_apps.py"
    session.run("python", str(script), *session.posargs)


@nox.session(python="3.11")
def docker_agent(session: nox.Session) -> None:
    """What the Docker agent costs a host: a connection and a GET through it beside straight
    to the container, p50/p99; a large read, MiB/s; the adapter's open; a renewal (as root,
    with docker.io; seconds).

    nox -s docker_agent -- --rounds 500 --megabytes 256   (any option)
    """
    _install(session, "test")
    script = ROOT / "adapters/docker/benchmarks/agent_dial.py"
    session.run("python", str(script), *session.posargs)


@nox.session(python="3.11")
def downstream_adapters(session: nox.Session) -> None:
    """Each adapter distribution's own suite (conformance included) against this core."""
    _install(session, "test")
    env = {"PANDO_CONTROLPLANE_BIN": _control_plane_bin()}
    for adapter in ADAPTERS:
        session.run("pytest", f"{adapter}/tests", env=env)


@nox.session(python="3.11")
def lease_stores(session: nox.Session) -> None:
    """Each lease store (PostgreSQL, Consul, etcd) under a membership: call latency, calls per
    retry period at rest and writes per renewal, a fleet's first deploy with and without its
    placement record, takeover after a crash (about a minute).

    nox -s lease_stores -- --stores etcd --rounds 10    (any option of the script)
    """
    _install(session, "test")
    session.run("python", "benchmarks/lease_stores.py", *session.posargs)


@nox.session(python="3.11")
def docker_replicas(session: nox.Session) -> None:
    """Three host replica processes sharing 300 apps over a fleet of two of the tests' Docker
    Engines, over each lease store in turn: rollout, apps per replica, takeover after a SIGKILL,
    the engines' events checked (as root, with docker.io; about ten minutes).

    nox -s docker_replicas -- --apps 60 --stores etcd    (any option of the script)
    """
    _install(session, "test")
    script = ROOT / "adapters/docker/benchmarks/docker_replicas.py"
    session.run("python", str(script), *session.posargs)
