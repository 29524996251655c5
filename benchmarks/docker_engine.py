"""Benchmark: the test harness's Docker Engine (tests/support/localdocker).

Opens and closes an engine ``--starts`` times and prints, for each figure, the minimum, median
and maximum seconds: the namespaces and stand-ins, dockerd answering ``/_ping``, the busybox
image's load through the API, a ``docker run --rm`` of ``true``, a daemon restart, and the
close (every change undone). Needs root and Debian's ``docker.io`` (tools/debian/install.sh);
says what is missing and exits 0 otherwise.

Prints figures; asserts nothing about time.

    python benchmarks/docker_engine.py [--starts 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localdocker import DockerEngine

ROOT = Path(__file__).resolve().parents[1]


def measure(starts: int, engine_class: type[DockerEngine]) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        figures.setdefault(name, []).append(seconds)

    for _ in range(starts):
        with tempfile.TemporaryDirectory(prefix="pando-docker-bench-") as work:
            engine = engine_class(Path(work))
            try:
                engine.open()
                for name in ("namespaces", "daemon start", "image load", "open"):
                    note(name, engine.timings[name])
                started = time.monotonic()
                engine.run("true")
                note("docker run --rm true", time.monotonic() - started)
                started = time.monotonic()
                engine.restart()
                note("daemon restart (stop + start)", time.monotonic() - started)
            finally:
                started = time.monotonic()
                engine.close()
                note("close", time.monotonic() - started)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localdocker import DockerEngine, missing  # noqa: PLC0415 - after the path above

    absent = missing()
    if absent:
        print(f"docker engine benchmark: skipped, this machine lacks {', '.join(absent)}")
        return 0
    figures = measure(args.starts, DockerEngine)
    print(f"docker engine (dockerd in namespaces of its own), {args.starts} starts:")
    for name, values in figures.items():
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"  {name:32} min {low:6.3f} s  median {mid:6.3f} s  max {high:6.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
