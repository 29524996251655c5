"""The quickstart on a real Docker Engine: the tests' engine started for the run, or yours.

By default it starts the Docker Engine the tests use (``tests/support/localdocker``: Debian's
dockerd 20.10 in network namespaces of its own, with a busybox image built offline; needs root
and Debian's ``docker.io``) and removes it, every change undone, at the end. With ``--host``
it runs on an engine of yours instead (``unix:///var/run/docker.sock``, ``tcp://...``): there it
pulls ``--image`` (``busybox:1.36`` by default) and touches only what its owner label marks.

The quickstart's lifecycle then runs through the Docker adapter, unchanged; only the app's
images are ones that really run here (busybox playing the web server and the database), and
its health checks are commands, as the daemon has no HTTP probe.

    python examples/docker_quickstart.py
    python examples/docker_quickstart.py --host unix:///var/run/docker.sock
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

import anyio
import attrs

import pando_runtime as pr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import quickstart  # noqa: E402 - beside this file

OWN_ENGINE_IMAGE = "busybox:1.36"
"""What runs on an engine of the user's (pulled by the adapter when absent)."""

WEB = (
    "echo 'web: connected to db'; echo 'web: listening on :8080'; "
    "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 8080 -h /www"
)
DB = (
    "echo 'db: ready to accept connections'; mkdir -p /db && "
    "echo '127.0.0.1:5432 - accepting connections' > /db/ready && exec httpd -f -p 5432 -h /db"
)
HEALTH = {"web": "http://127.0.0.1:8080/healthz", "db": "http://127.0.0.1:5432/ready"}
"""What each workload's health check fetches (busybox's wget; the daemon has no HTTP probe)."""
PROBE = "wget -q -O - http://127.0.0.1:5432/ready"
"""The exec step's command in db: ``pg_isready``'s part, played by the same page."""


def runnable_plan(image: str) -> quickstart.PlanMaker:
    """The quickstart's app with ``image`` in both workloads, each serving its port."""
    scripts = {"web": WEB, "db": DB}

    def plan_for(caps: pr.RuntimeCapabilities) -> pr.BundlePlan:
        plan = quickstart.make_plan(caps)
        workloads = tuple(
            attrs.evolve(
                workload,
                image=image,
                command=("sh", "-c", scripts[workload.name]),
                health=pr.HealthCheck(
                    command=("wget", "-q", "-O", "/dev/null", HEALTH[workload.name]),
                    interval_seconds=1,
                    timeout_seconds=2,
                ),
            )
            for workload in plan.workloads
        )
        return attrs.evolve(plan, workloads=workloads)

    return plan_for


def run_on(host: str, image: str) -> int:
    """Run the quickstart's lifecycle through the Docker adapter on the engine at ``host``."""
    settings = {
        "host": host,
        "owner": f"quickstart-{uuid.uuid4().hex[:6]}",
        "stop_timeout": 2,
        "helper_image": image,  # volume snapshots run in it (it has sh and tar): nothing to pull
    }
    print(f"engine {host}; image {image}; owner label {settings['owner']}")
    return anyio.run(
        quickstart.main,
        ["--adapter", "docker", "--config", json.dumps(settings), "--probe", PROBE],
        runnable_plan(image),
    )


def main(argv: list[str] | None = None) -> int:
    """Start the tests' engine (unless given ``--host``), run the lifecycle, stop it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--host", help="use this engine (unix://..., tcp://... with TLS, ssh://...) instead"
    )
    parser.add_argument("--image", help=f"the app's image (on --host: {OWN_ENGINE_IMAGE})")
    args = parser.parse_args(argv)
    if args.host:
        return run_on(args.host, args.image or OWN_ENGINE_IMAGE)
    from localdocker import DockerEngine, missing  # noqa: PLC0415 - needs the path above

    absent = missing()
    if absent:
        print(
            f"cannot start the tests' Docker Engine here: this machine lacks {', '.join(absent)}"
            "\nremedy: run as root with Debian's docker.io (tools/debian/install.sh), or give"
            " --host for an engine of yours",
            file=sys.stderr,
        )
        return 1
    print("starting a Docker Engine (dockerd in network namespaces of its own) ...")
    with (
        tempfile.TemporaryDirectory(prefix="pando-quickstart-docker-") as work,
        DockerEngine(Path(work)) as engine,
    ):
        print(f"engine up in {engine.timings['open']:.1f} s; socket {engine.socket_path}")
        return run_on(engine.base_url, args.image or engine.busybox)


if __name__ == "__main__":
    sys.exit(main())
