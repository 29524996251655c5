"""instrument(): spans, metrics and logs of contract operations, read back from the SDK."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any, Self

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_conformance_fake import FakeHarness, _scripted_fake

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite

pytestmark = pytest.mark.anyio

PLAN = pr.BundlePlan(
    bundle_id="shop",
    workloads=(
        pr.WorkloadPlan(name="db", image="postgres:16"),
        pr.WorkloadPlan(name="web", image="nginx:1.27", depends_on=("db",)),
    ),
)


class Otel:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, adapter: pr.RuntimeAdapter) -> pr.InstrumentedAdapter:
        return pr.instrument(
            adapter, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def otel() -> Iterator[Otel]:
    sdk = Otel()
    yield sdk
    sdk.meter_provider.shutdown()
    sdk.tracer_provider.shutdown()


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


class TestInstrumentedFakeConformance(ConformanceSuite):
    """Instrumenting changes nothing an adapter does: the wrapped fake passes the whole kit."""

    @pytest.fixture
    async def adapter(self) -> AsyncIterator[pr.RuntimeAdapter]:
        async with pr.instrument(_scripted_fake()) as runtime:
            yield runtime

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        return UnwrappingHarness()


SECRETS = ("env-secret-3141", "pull-password-2718", "file-content-1618", "exec-env-1414")


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Iterator[list[logging.LogRecord]]:
    handler = Capture()
    library = logging.getLogger("pando_runtime")
    level = library.level
    library.addHandler(handler)
    library.setLevel(logging.DEBUG)
    yield handler.records
    library.removeHandler(handler)
    library.setLevel(level)


def assert_no_secret(records: list[logging.LogRecord], secrets: tuple[str, ...]) -> None:
    """Nothing of a secret in any record: its message, its args or its extra attributes."""
    assert records, "something was logged, so the check can fail"
    for record in records:
        seen = " ".join([record.getMessage(), repr(record.args), repr(vars(record))])
        for secret in secrets:
            assert secret not in seen, (secret, record.getMessage())


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
