"""The kit's versions: each test says the API version it came with, and an adapter is held
to the version it declares; the stopping kit catches a "gone" said while destroy still runs."""

from __future__ import annotations

from datetime import datetime

import anyio.lowlevel
import pytest

import pando_runtime.testing.conformance as kit_package
from pando_runtime import BundleRef, DestroyOptions, ObservedBundle
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import (
    ConformanceBase,
    FakeHarness,
    Kit,
    StoppingConformance,
)

pytest_plugins = ["pytester"]


def _kit_classes() -> list[type]:
    """Every class of the kit's (exported or not), through the subclasses of its base."""
    found: list[type] = []
    pending: list[type] = [ConformanceBase]
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith(kit_package.__name__):
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def _untagged(*classes: type) -> list[str]:
    """``Class.test_name`` of each test defined in ``classes`` that says no ``since``."""
    return sorted(
        f"{cls.__name__}.{name}"
        for cls in classes
        for name, member in vars(cls).items()
        if name.startswith("test_")
        and not any(mark.name == "pando_since" for mark in getattr(member, "pytestmark", []))
    )


def test_every_kit_test_says_the_version_it_came_with() -> None:
    classes = _kit_classes()
    assert len(classes) >= 16, classes  # the mixins and the suite: the walk found them
    assert _untagged(*classes) == [], "kit tests without @since(version)"


def test_a_kit_test_without_a_version_is_named() -> None:
    class Forgetful(ConformanceBase):
        async def test_something_new(self, kit: Kit) -> None: ...

    assert _untagged(Forgetful, *_kit_classes()) == ["Forgetful.test_something_new"]


# Suites over a fake that says it was written for API 1.2, of the validation mixin: tests of
# 1.0, 1.1, 1.2 and 1.5.
SUITES_OF_A_12_ADAPTER = """
import attrs, pytest
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import FakeHarness, ValidationConformance


class FakeOf12(FakeAdapter):
    @classmethod
    def adapter_info(cls):
        return attrs.evolve(super().adapter_info(), api_version="1.2")


class Of12(ValidationConformance):
    @pytest.fixture
    def anyio_backend(self):
        return "asyncio"

    @pytest.fixture
    async def adapter(self):
        async with FakeOf12() as fake:
            yield fake

    @pytest.fixture
    def harness(self):
        return FakeHarness()


class TestDeclared(Of12):
    pass


class TestAskingOlder(Of12):
    conformance_version = "1.1"


class TestAskingNewer(Of12):
    conformance_version = "1.3"
"""


def _outcomes(recorder: pytest.HookRecorder) -> dict[str, dict[str, str]]:
    """Per class, each test's outcome: ``passed``, or why it was skipped or failed."""
    outcomes: dict[str, dict[str, str]] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        cls, name = report.nodeid.split("::")[1:]
        tests = outcomes.setdefault(cls, {})
        if report.skipped:
            reason: str = report.longrepr[2]  # type: ignore[index]
            tests[name] = "skipped: " + reason.removeprefix("Skipped: ")
        elif report.failed:
            tests[name] = f"failed: {report.longreprtext}"
        elif report.when == "call":
            tests[name] = "passed"
    return outcomes


def test_the_kit_holds_an_adapter_to_the_version_it_declares(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITES_OF_A_12_ADAPTER)
    outcomes = _outcomes(
        pytester.inline_run("-p", "pando_runtime.testing.pytest_plugin", "--tb=native")
    )

    declared = outcomes["TestDeclared"]
    assert declared["test_check_plan_refuses_what_apply_refuses_and_writes_nothing"] == "passed"
    assert declared["test_observe_refuses_a_not_before_that_is_no_aware_datetime"] == "passed"
    assert declared["test_plan_needing_stronger_isolation_is_refused"] == (
        "skipped: added in conformance 1.5; the adapter targets 1.2"
    )
    older = outcomes["TestAskingOlder"]
    assert older["test_check_plan_refuses_what_apply_refuses_and_writes_nothing"] == "passed"
    assert older["test_observe_refuses_a_not_before_that_is_no_aware_datetime"] == (
        "skipped: added in conformance 1.2; the adapter targets 1.1"
    )
    newer = outcomes["TestAskingNewer"]
    assert len(newer) == 6
    for outcome in newer.values():
        assert outcome.startswith("failed: ")
        assert "conformance_version 1.3 is above the adapter API version the adapter " in outcome
        assert "declares (1.2): it cannot promise what came later" in outcome


class GoneWhileEndingFake(FakeAdapter):
    """Says a bundle is gone from the moment ``destroy`` is called, as adapters before API 1.3
    did, and returns from ``destroy`` only once its instances have ended (the clock moved by
    ``destroy`` itself as by anyone's look): after it returns, "gone" is true."""

    def __init__(self) -> None:
        super().__init__()
        self.told_to_end: set[str] = set()

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        self.told_to_end.add(ref.bundle_id)
        await super().destroy(ref, options)
        while ref.bundle_id in self.world.leaving:
            self.clock.advance(0.25)
            self.world.settle_stops()
            await anyio.lowlevel.checkpoint()

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        if ref.bundle_id in self.told_to_end:
            return ObservedBundle(bundle_id=ref.bundle_id, exists=False)
        return await super().observe(ref, not_before=not_before)


@pytest.mark.anyio
async def test_the_stopping_kit_catches_gone_said_while_destroy_runs() -> None:
    check = StoppingConformance().test_destroy_reports_stopping_until_the_instance_has_ended
    async with GoneWhileEndingFake() as fake:
        kit = Kit(fake, FakeHarness(), await fake.capabilities())
        try:
            with pytest.raises(
                AssertionError,
                match=r"not so; the first: ended while destroy ran, the instance still running",
            ):
                await check(kit)
        finally:
            await kit.cleanup()
