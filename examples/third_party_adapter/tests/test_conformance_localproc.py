"""The example third-party adapter passes the conformance kit, loaded by name through its entry point."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import pando_runtime as pr
from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite

pytest_plugins = ["pando_runtime.testing.pytest_plugin"]

# What the workloads run: a process that obeys two files in its sandbox, so tests can make it
# exit with a code ("exit-code") or print a line ("say"), as a real app would on its own.
WORKLOAD_PROGRAM = """
import os, sys, time
while True:
    if os.path.exists("say"):
        text = open("say").read(); os.remove("say"); print(text, end="", flush=True)
    if os.path.exists("exit-code"):
        sys.exit(int(open("exit-code").read()))
    time.sleep(0.02)
"""


# A process that, told to end (SIGTERM), finishes its work for half a second first; it says
# when it traps SIGTERM ("trapping"): told to end before, it would end at once.
SLOW_STOP_PROGRAM = """
import signal, sys, time
def finish(*_):
    time.sleep(0.5)
    sys.exit(0)
signal.signal(signal.SIGTERM, finish)
open("trapping", "w").close()
while True:
    time.sleep(0.02)
"""


class LocalProcessHarness(ConformanceHarness):
    image = "example/ignored:1"
    command = (sys.executable, "-c", WORKLOAD_PROGRAM)
    timeout = 20.0
    poll_interval = 0.05
    quiet_period = 0.3

    def _sandbox(self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef) -> Path:
        root: Path = adapter.root  # type: ignore[attr-defined]
        return root / "bundles" / ref.bundle_id / ref.workload

    async def end_workload(
        self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, exit_code: int
    ) -> None:
        await anyio.Path(self._sandbox(adapter, ref) / "exit-code").write_text(str(exit_code))

    async def write_log(self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, data: bytes) -> None:
        sandbox = self._sandbox(adapter, ref)
        await anyio.Path(sandbox / "say").write_bytes(data)
        while await anyio.Path(sandbox / "say").exists():  # printed once the file is gone
            await anyio.sleep(0.02)

    async def slow_stop_workload(self, adapter: pr.RuntimeAdapter, name: str) -> pr.WorkloadPlan:
        return pr.WorkloadPlan(
            name=name,
            image=self.image,
            command=(sys.executable, "-c", SLOW_STOP_PROGRAM),
            health=pr.HealthCheck(command=("test", "-f", "trapping")),
        )

    async def instance_runs(
        self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, instance_id: str
    ) -> bool:
        """The kernel's word: the process (``pid-<pid>-...``) exists and is no zombie."""
        pid = instance_id.split("-")[1]
        try:
            stat = await anyio.Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rpartition(")")[2].split()[0] != "Z"

    def print_command(self, out: str, err: str) -> tuple[str, ...]:
        return (
            sys.executable,
            "-c",
            f"import sys; sys.stdout.write({out!r}); sys.stderr.write({err!r})",
        )


class TestLocalProcessConformance(ConformanceSuite):
    @pytest.fixture
    async def adapter(self, tmp_path: Path) -> AsyncIterator[pr.RuntimeAdapter]:
        # Loaded by name: the entry point of this distribution is what is under test too.
        async with pr.load_adapter("localproc", {"root": str(tmp_path)}) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        return LocalProcessHarness()


def test_listed_without_importing_the_adapter_module() -> None:
    code = (
        "import sys, pando_runtime as pr; info = {a.name: a for a in pr.available_adapters()}"
        "['localproc']; assert info.problem is None, info.problem;"
        " assert 'pando_runtime_localproc._adapter' not in sys.modules; print(info.distribution)"
    )
    listed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "pando-runtime-localproc"


@pytest.mark.anyio
async def test_events_flow_while_a_workload_waits_for_its_dependency(tmp_path: Path) -> None:
    # While db's health check has not passed yet, api has no instance at all: the event poll
    # met that window on a busy machine and failed with a KeyError. A slow check widens it.
    slow = pr.HealthCheck(command=(sys.executable, "-c", "import time; time.sleep(1)"))
    db = pr.WorkloadPlan(
        name="db", image="example/ignored:1", command=LocalProcessHarness.command, health=slow
    )
    api = pr.WorkloadPlan(
        name="api", image="example/ignored:1", command=LocalProcessHarness.command,
        depends_on=("db",),
    )  # fmt: skip
    plan = pr.BundlePlan(bundle_id="waits", workloads=(api, db))
    config = {"root": str(tmp_path), "poll_seconds": 0.01}
    async with pr.load_adapter("localproc", config) as adapter, adapter.watch_bundles() as events:
        assert (await anext(events)).kind is pr.BundleEventKind.WATCHING
        await adapter.apply(plan)
        started: list[str] = []
        with anyio.fail_after(20):
            async for event in events:
                if event.kind is pr.BundleEventKind.STARTED and event.workload:
                    started.append(event.workload)
                if len(started) == 2:
                    break
        assert started == ["db", "api"]
        await adapter.destroy(pr.BundleRef("waits"))
