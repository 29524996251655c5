"""Command line: ``python -m localcluster up [--detach] | down | status``.

``up`` prints the admin kubeconfig path on stdout (details go to stderr) and then runs in the
foreground until Ctrl-C or SIGTERM; with ``--detach`` it leaves the cluster running and records
it in the state directory, which ``down`` and ``status`` read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from .cluster import LocalCluster
from .errors import ClusterError, ClusterStartError
from .process import pid_alive, stop_pid
from .rest import Rest

ENV_STATE = "PANDO_LOCALCLUSTER_STATE"
STATE_FILE = "state.json"


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def default_state_dir() -> Path:
    """``$PANDO_LOCALCLUSTER_STATE`` or a per-user folder in the temp directory."""
    named = os.environ.get(ENV_STATE)
    if named:
        return Path(named)
    return Path(tempfile.gettempdir()) / f"pando-localcluster-{os.getuid()}"


def _read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((state_dir / STATE_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _alive(state: dict[str, Any]) -> list[str]:
    return [c["name"] for c in state.get("components", []) if pid_alive(int(c["pid"]), c["exe"])]


def _describe(cluster: LocalCluster) -> None:
    _out(str(cluster.kubeconfig))
    info = {
        "server": cluster.server,
        "kubeconfig": str(cluster.kubeconfig),
        "restricted_kubeconfig": str(cluster.restricted_kubeconfig),
        "restricted_user": cluster.restricted_user,
        "logs_file": str(cluster.logs_file),
        "work_dir": str(cluster.work_dir),
        "timings_s": cluster.timings,
    }
    _err(json.dumps(info, indent=2))


def cmd_up(args: argparse.Namespace) -> int:
    """Start a cluster (foreground, or detached into the state directory)."""
    if not args.detach:
        cluster = LocalCluster(keep_work_dir=args.keep or None)
        stop = False

        def on_signal(signum: int, frame: FrameType | None) -> None:
            nonlocal stop
            stop = True

        cluster.start(stream_build_output=True)  # Ctrl-C here: KeyboardInterrupt, cleaned up
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        _describe(cluster)
        _err("running; press Ctrl-C to stop")
        code = 0
        try:
            while not stop:
                dead = [c for c in cluster.components.values() if not c.running()]
                if dead:
                    _err(f"{dead[0].name} exited\n{cluster.component_logs()}")
                    code = 1
                    break
                time.sleep(0.5)
        finally:
            _err("stopping ...")
            cluster.stop()
        return code

    state_dir: Path = args.state_dir
    old = _read_state(state_dir)
    if old is not None and _alive(old):
        _err(f"a cluster is already running (state in {state_dir}); run 'down' first")
        return 1
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    cluster = LocalCluster(work_dir=state_dir, keep_work_dir=True)
    try:
        cluster.start(detach=True, stream_build_output=True)
    except BaseException:
        shutil.rmtree(state_dir, ignore_errors=True)
        raise
    cluster.write_state(state_dir / STATE_FILE)
    _describe(cluster)
    _err(f"detached; stop it with: python -m localcluster down --state-dir {state_dir}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Stop a detached cluster (reverse start order) and delete its state directory."""
    state_dir: Path = args.state_dir
    state = _read_state(state_dir)
    if state is None:
        _err(f"no cluster recorded in {state_dir}")
        return 0
    for c in reversed(state.get("components", [])):
        stop_pid(int(c["pid"]), c["exe"], timeout=args.timeout)
    shutil.rmtree(state_dir, ignore_errors=True)
    _err(f"stopped; removed {state_dir}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Report whether the detached cluster's components run and the apiserver is ready."""
    state_dir: Path = args.state_dir
    state = _read_state(state_dir)
    if state is None:
        _out(f"not running (no state in {state_dir})")
        return 1
    alive = set(_alive(state))
    pki = Path(state["work_dir"]) / "pki"
    readyz, _ = Rest(state["server"], pki / "ca.crt", pki / "admin.crt", pki / "admin.key").get(
        "/readyz"
    )
    report = {
        "server": state["server"],
        "readyz": readyz,
        "kubeconfig": state["kubeconfig"],
        "restricted_kubeconfig": state["restricted_kubeconfig"],
        "logs_file": state["logs_file"],
        "components": {
            c["name"]: {"pid": c["pid"], "running": c["name"] in alive} for c in state["components"]
        },
    }
    _out(json.dumps(report, indent=2))
    return 0 if readyz == 200 and len(alive) == len(state["components"]) else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m localcluster``."""
    parser = argparse.ArgumentParser(
        prog="python -m localcluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a cluster and print the admin kubeconfig path")
    up.add_argument("--detach", action="store_true", help="leave it running in the background")
    up.add_argument("--keep", action="store_true", help="keep the temp dir after Ctrl-C")
    up.set_defaults(func=cmd_up)
    down = sub.add_parser("down", help="stop a detached cluster")
    down.add_argument("--timeout", type=float, default=5.0, help="seconds before SIGKILL")
    down.set_defaults(func=cmd_down)
    status = sub.add_parser("status", help="show a detached cluster's state")
    status.set_defaults(func=cmd_status)
    for p in (up, down, status):
        p.add_argument(
            "--state-dir",
            type=Path,
            default=default_state_dir(),
            help="where a detached cluster is recorded (default: %(default)s)",
        )
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ClusterStartError as exc:  # the component logs were already printed
        _err(f"error: {str(exc).splitlines()[0]}")
        return 1
    except ClusterError as exc:
        _err(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
