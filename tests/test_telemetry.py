"""instrument(): spans, metrics and logs of contract operations, read back from the SDK."""

from __future__ import annotations

import contextlib
import gc
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from types import TracebackType
from typing import Self

import pytest
from observing import Otel, assert_no_secret, capturing, otel_sdk
from opentelemetry.trace import StatusCode

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    ConformanceSuite,
    FakeHarness,
    scripted_fake,
)

pytestmark = pytest.mark.anyio

PLAN = pr.BundlePlan(
    bundle_id="shop",
    workloads=(
        pr.WorkloadPlan(name="db", image="postgres:16"),
        pr.WorkloadPlan(name="web", image="nginx:1.27", depends_on=("db",)),
    ),
)


@pytest.fixture
def otel() -> Iterator[Otel]:
    with otel_sdk() as sdk:
        yield sdk


async def test_a_span_per_operation_with_the_bundle_id(otel: Otel) -> None:
    async with otel.instrument(FakeAdapter()) as runtime:
        await runtime.apply(PLAN)
        await runtime.observe(pr.BundleRef("shop"))
        await runtime.destroy(pr.BundleRef("shop"))
    spans = {s.name: s for s in otel.spans.get_finished_spans()}
    assert set(spans) >= {
        "pando_runtime apply",
        "pando_runtime observe",
        "pando_runtime destroy",
        "pando_runtime aclose",
    }
    apply = spans["pando_runtime apply"]
    assert apply.attributes is not None
    assert dict(apply.attributes) == {
        "pando.operation": "apply",
        "pando.adapter": "fake",
        "pando.bundle_id": "shop",
    }
    assert apply.status.status_code is StatusCode.UNSET


async def test_durations_and_errors_by_code(otel: Otel) -> None:
    async with otel.instrument(FakeAdapter()) as runtime:
        assert isinstance(runtime.adapter, FakeAdapter)
        await runtime.apply(PLAN)
        await runtime.apply(PLAN)
        runtime.adapter.faults.fail_next("observe", pr.AdapterUnavailable("the runtime is down"))
        with pytest.raises(pr.AdapterUnavailable):
            await runtime.observe(pr.BundleRef("shop"))
        with pytest.raises(pr.NotFound):
            async with runtime.logs(pr.WorkloadRef("shop", "nope")):
                pass
    durations = {
        (p.attributes["pando.operation"], p.attributes.get("error.type")): p
        for p in otel.points("pando_runtime.operation.duration")
    }
    assert durations["apply", None].count == 2
    assert durations["observe", "ADAPTER_UNAVAILABLE"].count == 1
    assert durations["apply", None].sum > 0
    errors = {
        (p.attributes["pando.operation"], p.attributes["error.type"]): p.value
        for p in otel.points("pando_runtime.operation.errors")
    }
    assert errors == {("observe", "ADAPTER_UNAVAILABLE"): 1, ("logs", "NOT_FOUND"): 1}
    assert all(
        "pando.bundle_id" not in p.attributes
        for p in otel.points("pando_runtime.operation.duration")
    ), "ids are span attributes, never metric labels"
    failed = next(s for s in otel.spans.get_finished_spans() if s.name == "pando_runtime observe")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None
    assert failed.attributes["error.type"] == "ADAPTER_UNAVAILABLE"
    assert not failed.events, "no exception message in the trace"


async def test_open_streams_are_counted_until_their_block_ends(otel: Otel) -> None:
    def open_streams() -> dict[str, int]:
        return {
            p.attributes["pando.stream"]: p.value for p in otel.points("pando_runtime.streams.open")
        }

    async with otel.instrument(FakeAdapter()) as runtime:
        await runtime.apply(PLAN)
        async with runtime.watch_bundles() as events, runtime.logs(pr.WorkloadRef("shop", "web")):
            assert open_streams() == {"watch_bundles": 1, "logs": 1}
            assert (await events.__anext__()).kind is pr.BundleEventKind.WATCHING
        assert open_streams() == {"watch_bundles": 0, "logs": 0}


async def test_the_wrapper_is_the_adapter_it_wraps(otel: Otel) -> None:
    fake = FakeAdapter({"nodes": 3})
    runtime = otel.instrument(fake)
    assert (runtime.kind, runtime.description) == (fake.kind, fake.description)
    assert runtime.config == fake.config
    assert runtime.info == fake.info
    assert type(runtime).Config is type(fake).Config
    assert otel.instrument(runtime) is runtime
    assert runtime.upstream(pr.WorkloadRef("shop", "web"), 80) == fake.upstream(
        pr.WorkloadRef("shop", "web"), 80
    )
    await runtime.aclose()
    assert fake.closed


class Recording(FakeAdapter):
    """A fake that records its own ``async with`` block, as an adapter that starts work there."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[str] = []

    async def __aenter__(self) -> Self:
        self.blocks.append("enter")
        return await super().__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.blocks.append(f"exit {exc_type.__name__ if exc_type else None}")
        await super().__aexit__(exc_type, exc, tb)


async def test_the_wrappers_block_is_the_adapters_block(otel: Otel) -> None:
    recording = Recording()
    async with otel.instrument(recording) as runtime:
        assert recording.blocks == ["enter"], "entered with the wrapper"
        await runtime.apply(PLAN)
    assert recording.blocks == ["enter", "exit None"]
    assert recording.closed
    with pytest.raises(LookupError):
        async with otel.instrument(recording):
            raise LookupError
    assert recording.blocks[2:] == ["enter", "exit LookupError"], "the error is the adapter's"
    spans = [s.name for s in otel.spans.get_finished_spans()]
    assert spans.count("pando_runtime open") == 2
    assert spans.count("pando_runtime aclose") == 2, "one close per block"


class CallingFake(FakeAdapter):
    """A fake that reports API calls, as an adapter with an API of its own does."""

    def __init__(self) -> None:
        super().__init__()
        self.observer: pr.plugin.ApiObserver = pr.plugin.NO_API_OBSERVER

    def observe_api(self, observer: pr.plugin.ApiObserver) -> None:
        self.observer = observer.bind(cluster="eu-1")
        self.observer.track(self)

    def api_state(self) -> pr.plugin.ApiState:
        return pr.plugin.ApiState(
            cached_objects={"pods": 3}, open_watches={"pods": 1, "services": 0}
        )

    async def observe(
        self, ref: pr.BundleRef, *, not_before: datetime | None = None
    ) -> pr.ObservedBundle:
        self.observer.call("get", "namespaces", 200, 0.002)
        self.observer.call("list", "pods", 503, 0.004)
        return await super().observe(ref, not_before=not_before)


async def test_an_adapters_api_calls_are_measured_on_the_same_meter(otel: Otel) -> None:
    fake = CallingFake()
    assert isinstance(fake, pr.plugin.ObservableApi)
    async with otel.instrument(fake) as runtime:
        assert fake.observer is not pr.plugin.NO_API_OBSERVER, "instrument() hands an observer"
        await runtime.observe(pr.BundleRef("shop"))
        await runtime.observe(pr.BundleRef("shop"))
        fake.observer.watch_restarted("pods", "gone")
    calls = {
        (p.attributes["pando.api.verb"], p.attributes["http.response.status_code"]): p.value
        for p in otel.points("pando_runtime.api.calls")
    }
    assert calls == {("get", 200): 2, ("list", 503): 2}
    durations = otel.points("pando_runtime.api.duration")
    assert sum(p.count for p in durations) == 4
    assert {p.attributes["pando.cluster"] for p in durations} == {"eu-1"}
    assert {p.attributes["pando.adapter"] for p in durations} == {"fake"}
    [restart] = otel.points("pando_runtime.api.watch_restarts")
    assert dict(restart.attributes) == {
        "pando.adapter": "fake",
        "pando.cluster": "eu-1",
        "pando.api.resource": "pods",
        "pando.reason": "gone",
    }
    [cached] = otel.points("pando_runtime.cache.objects")
    assert (cached.value, cached.attributes["pando.api.resource"]) == (3, "pods")
    watches = {
        p.attributes["pando.api.resource"]: p.value
        for p in otel.points("pando_runtime.api.watches")
    }
    assert watches == {"pods": 1, "services": 0}


async def test_a_gauge_forgets_an_adapter_that_is_gone(otel: Otel) -> None:
    fake = CallingFake()
    otel.instrument(fake)
    assert otel.points("pando_runtime.cache.objects")
    del fake
    gc.collect()
    assert not otel.points("pando_runtime.cache.objects"), "held weakly, never kept alive"


def test_an_unobserved_adapter_reports_nowhere() -> None:
    observer = pr.plugin.NO_API_OBSERVER
    assert observer.bind(cluster="eu-1") is observer
    observer.call("get", "pods", 200, 0.1)
    observer.watch_restarted("pods", "gone")
    observer.track(CallingFake())
    assert CallingFake().observer is observer


class UnwrappingHarness(FakeHarness):
    """The fake's test controls, reached through the instrumented wrapper."""

    async def end_workload(
        self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, code: int
    ) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().end_workload(adapter.adapter, ref, code)

    async def oom_kill(self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().oom_kill(adapter.adapter, ref)

    async def write_log(self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, data: bytes) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().write_log(adapter.adapter, ref, data)

    async def cause_event_gap(self, adapter: pr.RuntimeAdapter) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().cause_event_gap(adapter.adapter)

    async def cache_goes_stale(self, adapter: pr.RuntimeAdapter) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().cache_goes_stale(adapter.adapter)

    async def cache_unconfirmed(self, adapter: pr.RuntimeAdapter) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().cache_unconfirmed(adapter.adapter)

    async def cache_recovers(self, adapter: pr.RuntimeAdapter) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().cache_recovers(adapter.adapter)

    async def runtime_hangs(self, adapter: pr.RuntimeAdapter) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().runtime_hangs(adapter.adapter)

    async def runtime_answers(self, adapter: pr.RuntimeAdapter) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().runtime_answers(adapter.adapter)

    async def unpullable_image(self, adapter: pr.RuntimeAdapter) -> str:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        return await super().unpullable_image(adapter.adapter)

    async def slow_stop_workload(self, adapter: pr.RuntimeAdapter, name: str) -> pr.WorkloadPlan:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        return await super().slow_stop_workload(adapter.adapter, name)

    async def instance_runs(
        self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef, instance_id: str
    ) -> bool:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        return await super().instance_runs(adapter.adapter, ref, instance_id)

    async def lose_node(self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().lose_node(adapter.adapter, ref)

    async def recover_node(self, adapter: pr.RuntimeAdapter) -> None:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        await super().recover_node(adapter.adapter)

    async def running_instances(self, adapter: pr.RuntimeAdapter, ref: pr.WorkloadRef) -> int:
        assert isinstance(adapter, pr.InstrumentedAdapter)
        return await super().running_instances(adapter.adapter, ref)

    @contextlib.asynccontextmanager
    async def replica(self, adapter: pr.RuntimeAdapter) -> AsyncIterator[pr.RuntimeAdapter]:
        """Another replica of the wrapped fake, instrumented as the first is."""
        assert isinstance(adapter, pr.InstrumentedAdapter)
        async with super().replica(adapter.adapter) as other:
            yield pr.instrument(other)


class TestInstrumentedFakeConformance(ConformanceSuite):
    """Instrumenting changes nothing an adapter does: the wrapped fake passes the whole kit."""

    @pytest.fixture
    async def adapter(self) -> AsyncIterator[pr.RuntimeAdapter]:
        async with pr.instrument(scripted_fake()) as runtime:
            yield runtime

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        return UnwrappingHarness()


SECRETS = ("env-secret-3141", "pull-password-2718", "file-content-1618", "exec-env-1414")


@pytest.fixture
def captured() -> Iterator[list[logging.LogRecord]]:
    with capturing() as records:
        yield records


async def test_debug_logs_of_a_plan_with_secrets_hold_none_of_them(
    captured: list[logging.LogRecord],
) -> None:
    workload = pr.WorkloadPlan(
        name="web",
        image="registry.example/shop/web:1",
        env={"API_KEY": SECRETS[0]},
        pull_auth=pr.RegistryAuth(registry="registry.example", username="u", password=SECRETS[1]),
        files=(pr.CarriedFile("/etc/web.conf", f"token = {SECRETS[2]}\n".encode()),),
    )
    plan = pr.BundlePlan(bundle_id="shop", workloads=(workload,))
    fake = FakeAdapter()
    async with pr.instrument(fake) as runtime:
        await runtime.apply(plan)
        await runtime.observe(pr.BundleRef("shop"))
        request = pr.ExecRequest(command=("env",), env={"EXEC_SECRET": SECRETS[3]})
        await runtime.run(pr.WorkloadRef("shop", "web"), request)
        fake.faults.fail_next("apply", pr.AdapterUnavailable("the runtime is down"))
        with pytest.raises(pr.AdapterUnavailable):
            await runtime.apply(plan)
        fake.exit_workload(pr.WorkloadRef("shop", "web"), 3)
        await runtime.destroy(pr.BundleRef("shop"))
    assert_no_secret(captured, SECRETS)
    by_level = {(r.levelno, r.name) for r in captured}
    assert (logging.INFO, "pando_runtime.fake") in by_level, "apply's writes are news"
    assert (logging.WARNING, "pando_runtime.operations") in by_level, "an unreachable runtime"
    applied = next(r for r in captured if r.getMessage().startswith("applied shop"))
    assert applied.bundle_id == "shop"  # type: ignore[attr-defined]
    failed = next(r for r in captured if r.levelno == logging.WARNING)
    assert (failed.code, failed.operation) == ("ADAPTER_UNAVAILABLE", "apply")  # type: ignore[attr-defined]


def test_the_library_prints_nothing_until_the_host_configures_logging() -> None:
    code = (
        "import anyio, logging, sys\n"
        "import pando_runtime as pr\n"
        "from pando_runtime.testing import FakeAdapter\n"
        "async def main():\n"
        "    async with pr.instrument(FakeAdapter()) as runtime:\n"
        "        runtime.adapter.simulate_gap()\n"  # a warning
        "        runtime.adapter.faults.fail_next('observe', pr.AdapterUnavailable('down'))\n"
        "        try:\n"
        "            await runtime.observe(pr.BundleRef('a'))\n"
        "        except pr.AdapterUnavailable:\n"
        "            pass\n"
        "anyio.run(main)\n"
        "assert any(isinstance(h, logging.NullHandler)"
        " for h in logging.getLogger('pando_runtime').handlers)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_opentelemetry_is_imported_only_by_instrument() -> None:
    code = (
        "import sys, anyio\n"
        "import pando_runtime as pr\n"
        "from pando_runtime.testing import FakeAdapter\n"
        "async def main():\n"
        "    async with FakeAdapter() as fake:\n"
        "        await fake.observe(pr.BundleRef('a'))\n"
        "anyio.run(main)\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'not yet'\n"
        "pr.instrument(FakeAdapter())\n"
        "assert 'opentelemetry.metrics' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


async def test_without_the_api_the_wrapper_still_logs(
    captured: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    async with pr.instrument(FakeAdapter()) as runtime:
        assert not runtime._otel.enabled
        await runtime.observe(pr.BundleRef("shop"))
    operations = [r for r in captured if r.name == "pando_runtime.operations"]
    assert "observe" in [r.operation for r in operations]  # type: ignore[attr-defined]
