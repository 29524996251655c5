"""Command line: ``python -m localdocker [--work-dir DIR]``: a Docker Engine by hand.

Starts an engine (see :class:`localdocker.DockerEngine`), prints ``DOCKER_HOST=unix:///...``
on stdout (the namespaces, stand-ins and figures on stderr) and runs until Ctrl-C or SIGTERM,
then stops it and undoes every change. Needs root and Debian's ``docker.io``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

from .engine import DockerEngine
from .requirements import missing


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m localdocker", description=__doc__)
    parser.add_argument("--work-dir", type=Path, help="default: a new temporary folder")
    args = parser.parse_args(argv)
    absent = missing()
    if absent:
        sys.stderr.write(f"localdocker: this machine lacks {', '.join(absent)}\n")
        return 2
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="pando-docker-"))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    with DockerEngine(work_dir) as engine:
        sys.stdout.write(f"DOCKER_HOST={engine.base_url}\n")
        sys.stdout.flush()
        stand_ins = ", ".join(engine.outside.addresses)
        figures = ", ".join(f"{k} {v:.2f} s" for k, v in engine.timings.items())
        sys.stderr.write(
            f"engine namespace {engine.netns}, outside {engine.outside_netns} ({stand_ins}); "
            f"images {', '.join(engine.images)}; {figures}\nCtrl-C stops it.\n"
        )
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
