"""The blocking facade: the same contract, from plain threads, on asyncio and trio."""

from __future__ import annotations

import pytest

import pando_runtime as pr
from pando_runtime.blocking import BlockingRuntime
from pando_runtime.testing import FakeAdapter, make_tar, read_tar, scripted


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_full_lifecycle_without_async(backend: str) -> None:
    fake = FakeAdapter()
    fake.on_exec(("hostname",), scripted(stdout=b"web-1\n"))
    plan = pr.BundlePlan(
        bundle_id="app",
        workloads=(pr.WorkloadPlan(name="web", image="x/web:1", mounts=(pr.Mount("v", "/d"),)),),
        volumes=(pr.VolumePlan(volume_id="v", name="data"),),
    )
    ref = pr.WorkloadRef("app", "web")
    with BlockingRuntime(fake, backend=backend) as runtime:
        assert runtime.capabilities().exec
        runtime.health_check()
        with runtime.watch_bundles() as events:
            assert next(events).kind is pr.BundleEventKind.WATCHING
            handle = runtime.apply(plan)
            assert next(events).kind is pr.BundleEventKind.STARTED
        assert runtime.observe(handle.ref).all_running
        fake.write_log(ref, b"hello\n")
        assert runtime.logs(ref) == b"hello\n"
        assert runtime.run(ref, pr.ExecRequest(command=("hostname",))).stdout == b"web-1\n"
        volume = runtime.observe(handle.ref).volume("v").handle
        assert volume is not None
        runtime.restore_volume(volume, make_tar({"f": b"1"}))
        assert read_tar(runtime.snapshot_volume(volume)) == {"f": b"1"}
        assert runtime.capacity().total_cpu_millis > 0
        runtime.destroy(handle.ref)
        assert not runtime.observe(handle.ref).exists
    assert fake.closed


def test_follow_logs_iterates_until_the_workload_ends() -> None:
    with BlockingRuntime.load("fake") as runtime:
        fake = runtime.adapter
        assert isinstance(fake, FakeAdapter)
        runtime.apply(
            pr.BundlePlan(bundle_id="a", workloads=(pr.WorkloadPlan(name="w", image="x/w:1"),))
        )
        ref = pr.WorkloadRef("a", "w")
        fake.write_log(ref, b"one\n")
        with runtime.follow_logs(ref) as chunks:
            assert next(chunks) == b"one\n"
            runtime.portal.call(lambda: _exit(fake, ref))
            assert list(chunks) == []


async def _exit(fake: FakeAdapter, ref: pr.WorkloadRef) -> None:
    fake.exit_workload(ref, 0)


def test_errors_cross_the_thread_unchanged() -> None:
    with BlockingRuntime.load("fake") as runtime, pytest.raises(pr.InvalidPlan):
        runtime.apply(pr.BundlePlan(bundle_id="bad id", workloads=()))
    with pytest.raises(RuntimeError, match="context manager"):
        BlockingRuntime.load("fake").capacity()


def test_a_bad_not_before_is_refused_through_the_wrappers_too() -> None:
    fake = FakeAdapter()
    ref = pr.BundleRef("app")
    with BlockingRuntime(pr.instrument(fake)) as runtime, pytest.raises(pr.InvalidInput) as caught:
        runtime.observe(ref, not_before="2026-01-01T00:00:00")  # type: ignore[arg-type]
    assert [p.path for p in caught.value.problems] == ["not_before"]
    assert "a str" in caught.value.problems[0].message
