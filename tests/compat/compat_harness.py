"""The kit's harness for the compatibility plugins: ``sh`` workloads steered through files.

Shared by today's tests (``test_*.py`` here) and the era kits (``era/``), so it uses only
hooks every kit since API 1.0 knows, plus the 1.3 stopping hooks older kits never call.
"""

from __future__ import annotations

from pathlib import Path

import anyio

import pando_runtime as pr
from pando_runtime.testing.conformance import ConformanceHarness

# A workload that obeys two files in its sandbox, as a real app would on its own: "say" (print
# it, then remove it) and "exit-code" (exit with it).
WORKLOAD = (
    "while :; do"
    " if [ -f say ]; then cat say; rm -f say; fi;"
    ' if [ -f exit-code ]; then exit "$(cat exit-code)"; fi;'
    " sleep 0.02;"
    " done"
)
# Told to end (SIGTERM), it finishes its work for half a second first.
SLOW_STOP = "trap 'sleep 0.5; exit 0' TERM; while :; do sleep 0.02; done"
# It ignores SIGTERM (its children inherit that): only SIGKILL ends it. The file "deaf" says
# the trap is set (a SIGTERM before that would end it at once).
DEAF = "trap '' TERM; : > deaf; while :; do sleep 0.05; done"


class ShellHarness(ConformanceHarness):
    """Workloads are ``sh -c`` scripts in ``<root>/bundles/<bundle>/<workload>`` sandboxes."""

    image = "compat/ignored:1"
    command = ("sh", "-c", WORKLOAD)
    timeout = 20.0
    poll_interval = 0.05
    quiet_period = 0.3

    def __init__(self, root: Path) -> None:
        self.root = root

    def sandbox(self, ref: pr.WorkloadRef) -> anyio.Path:
        return anyio.Path(self.root / "bundles" / ref.bundle_id / ref.workload)

    async def _drop(self, ref: pr.WorkloadRef, name: str, data: bytes) -> None:
        """Write whole, then rename: the workload never reads half a file."""
        sandbox = self.sandbox(ref)
        await (sandbox / f".{name}").write_bytes(data)
        await (sandbox / f".{name}").rename(sandbox / name)

    async def end_workload(
        self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, exit_code: int
    ) -> None:
        await self._drop(ref, "exit-code", str(exit_code).encode())

    async def write_log(self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, data: bytes) -> None:
        await self._drop(ref, "say", data)
        while await (self.sandbox(ref) / "say").exists():  # printed once the file is gone
            await anyio.sleep(0.02)

    async def slow_stop_workload(self, adapter: pr.RuntimeAdapter, name: str) -> pr.WorkloadPlan:
        return pr.WorkloadPlan(name=name, image=self.image, command=("sh", "-c", SLOW_STOP))

    async def instance_runs(
        self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, instance_id: str
    ) -> bool:
        return process_runs(instance_id)


def process_runs(instance_id: str) -> bool:
    """The kernel's word: the process of ``pid-<pid>-...`` exists and is no zombie."""
    try:
        stat = Path(f"/proc/{instance_id.split('-')[1]}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
