"""The conformance kit's machinery: fixtures, capability gates, and the ``kit`` helper."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import anyio
import pytest

from ..._adapter._abc import RuntimeAdapter
from ..._contract._capabilities import Capability, RuntimeCapabilities
from ..._contract._errors import PandoRuntimeError
from ..._contract._observed import ObservedBundle
from ..._contract._plans import BundlePlan, VolumePlan, WorkloadPlan
from ..._contract._refs import BundleHandle, BundleRef, DestroyOptions, WorkloadRef
from ..._contract._version import API_VERSION, parse_api_version
from ..._contract._volumes import VolumeHandle
from ._harness import ConformanceHarness, HarnessCannot

__all__ = ["CONFORMANCE_VERSION", "ConformanceBase", "Kit", "requires", "since"]

CONFORMANCE_VERSION = API_VERSION
"""The kit's version: it tests the contract of this adapter API version."""

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def requires(*capabilities: Capability) -> Callable[[F], F]:
    """Run the test only where the adapter declares every one of ``capabilities``."""
    return pytest.mark.pando_requires(*capabilities)


def since(version: str) -> Callable[[F], F]:
    """The adapter API version the test came with; adapters targeting an older kit skip it.

    Every test of the kit says it (a test whose meaning changed says the later version).
    """
    return pytest.mark.pando_since(version)


def _gate_of(cls: type, test_name: str) -> tuple[Capability, ...]:
    """The ``gate`` of the class that defines ``test_name`` (marks would be inherited)."""
    for owner in cls.__mro__:
        if test_name in owner.__dict__:
            gate: tuple[Capability, ...] = owner.__dict__.get("gate", ())
            return gate
    return ()


def _target_version(declared: str, asked: str | None) -> str:
    """The kit version a suite runs: ``asked`` (its ``conformance_version``) or ``declared``.

    ``declared`` is the API version the adapter says it was written for; a suite may ask
    for an older kit, never a newer one: the adapter cannot promise what came after it.
    """
    if asked is None:
        return declared
    if parse_api_version(asked) > parse_api_version(declared):
        pytest.fail(
            f"conformance_version {asked} is above the adapter API version the adapter "
            f"declares ({declared}): it cannot promise what came later; lower "
            "conformance_version, or declare the newer version in the adapter's info"
        )
    return asked


class Kit:
    """Helpers bound to one test: the adapter, its harness, and cleanup of what it made."""

    def __init__(
        self, adapter: RuntimeAdapter, harness: ConformanceHarness, caps: RuntimeCapabilities
    ) -> None:
        self.adapter = adapter
        self.harness = harness
        self.caps = caps
        self._bundles: list[str] = []
        self._volumes: list[VolumeHandle] = []
        self._edges: list[str] = []

    def new_id(self, prefix: str = "conf") -> str:
        """A fresh id, unique to this test run, valid as a bundle or volume id."""
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    def workload(self, name: str, **fields: Any) -> WorkloadPlan:
        """A workload plan running the harness's image, with ``fields`` on top."""
        fields.setdefault("image", self.harness.image)
        fields.setdefault("command", self.harness.command)
        return WorkloadPlan(name=name, **fields)

    def plan(
        self,
        *workloads: WorkloadPlan,
        bundle_id: str | None = None,
        volumes: tuple[VolumePlan, ...] = (),
    ) -> BundlePlan:
        """A bundle plan of ``workloads`` (one called ``web`` by default)."""
        return BundlePlan(
            bundle_id=bundle_id or self.new_id(),
            workloads=workloads or (self.workload("web"),),
            volumes=volumes,
            labels={"conformance": "true"},
            isolation=self.harness.plan_isolation,
        )

    def track(self, bundle_id: str) -> None:
        """Destroy ``bundle_id`` (with its volumes) when the test ends."""
        if bundle_id not in self._bundles:
            self._bundles.append(bundle_id)

    def track_volume(self, handle: VolumeHandle) -> None:
        """Destroy the volume when the test ends."""
        self._volumes.append(handle)

    def track_edge(self, name: str) -> None:
        """Remove the edge when the test ends."""
        self._edges.append(name)

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Apply ``plan`` and clean it up after the test."""
        self.track(plan.bundle_id)
        return await self.adapter.apply(plan)

    async def observe(self, plan_or_id: BundlePlan | str) -> ObservedBundle:
        """Observe a bundle by plan or id."""
        bundle_id = plan_or_id if isinstance(plan_or_id, str) else plan_or_id.bundle_id
        return await self.adapter.observe(BundleRef(bundle_id))

    async def eventually(
        self,
        check: Callable[[], Awaitable[T | None]],
        what: str,
        within: float | None = None,
    ) -> T:
        """Poll ``check`` until it returns something other than ``None``/``False``."""
        last: T | None = None
        with anyio.move_on_after(within or self.harness.timeout):
            while True:
                last = await check()
                if last is not None and last is not False:
                    return last
                await anyio.sleep(self.harness.poll_interval)
        pytest.fail(f"timed out waiting for {what}; last seen: {last!r}")

    async def until_observed(
        self, plan: BundlePlan, predicate: Callable[[ObservedBundle], bool], what: str
    ) -> ObservedBundle:
        """Observe until ``predicate`` holds; fail with the last observation otherwise."""

        async def check() -> ObservedBundle | None:
            observed = await self.observe(plan)
            return observed if predicate(observed) else None

        return await self.eventually(check, what)

    async def running(self, plan: BundlePlan) -> ObservedBundle:
        """Wait until every workload of ``plan`` runs."""
        return await self.until_observed(
            plan, lambda o: o.all_running, f"every workload of {plan.bundle_id} to run"
        )

    async def applied_and_running(self, plan: BundlePlan) -> ObservedBundle:
        """Apply ``plan``, then wait until all of it runs."""
        await self.apply(plan)
        return await self.running(plan)

    def ref(self, plan: BundlePlan, workload: str | None = None) -> WorkloadRef:
        """A ref to a workload of ``plan`` (its first by default)."""
        return WorkloadRef(plan.bundle_id, workload or plan.workloads[0].name)

    def needs(self, *hooks: str) -> None:
        """Skip the test now, before it starts anything, unless the harness has ``hooks``.

        Skipping inside an open stream would surface as an error group, not a skip.
        """
        missing = [h for h in hooks if not self.harness.can(h)]
        if missing:
            pytest.skip(f"the harness has no {', '.join(missing)}")

    async def harness_call(self, hook: Awaitable[None]) -> None:
        """Await a harness hook; skip the test where the harness cannot do it."""
        try:
            await hook
        except HarnessCannot as cannot:
            pytest.skip(f"the harness cannot {cannot.args[0]}")

    async def quiet(self) -> None:
        """Let the runtime's quiet period pass (to see that nothing happens)."""
        await anyio.sleep(self.harness.quiet_period)

    async def cleanup(self) -> None:
        """Remove everything the test made; errors are collected, not hidden."""
        errors: list[PandoRuntimeError] = []
        for bundle_id in self._bundles:
            try:
                await self.adapter.destroy(BundleRef(bundle_id), DestroyOptions(keep_volumes=False))
            except PandoRuntimeError as error:
                errors.append(error)
        for edge in self._edges:
            try:
                await self.adapter.remove_edge(edge)
            except PandoRuntimeError as error:
                errors.append(error)
        for handle in self._volumes:
            try:
                await self.adapter.destroy_volume(handle)
            except PandoRuntimeError as error:
                errors.append(error)
        if errors:
            raise errors[0]


class ConformanceBase:
    """Fixtures every conformance mixin shares.

    An adapter's suite overrides ``adapter`` (required) and, optionally,
    ``harness``, ``anyio_backend`` (asyncio and trio by default) and the
    class attributes ``xfail`` (test name -> reason), ``conformance_version`` and
    ``single_pool``.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
    gate: ClassVar[tuple[Capability, ...]] = ()
    """Capabilities every test *defined in* this class needs (not inherited by subclasses)."""
    xfail: ClassVar[dict[str, str]] = {}
    conformance_version: ClassVar[str | None] = None
    """The kit version to hold the adapter to; ``None``: the API version the adapter declares
    (``adapter.info.api_version``). Tests that came later are skipped."""
    single_pool: ClassVar[bool] = True
    """Whether a bundle may be placed anywhere ``capacity`` counts. ``False`` for adapters over
    several pools (clusters, regions) where a bundle stays in the one it was placed in: its
    largest fit is then its own pool's, which may be smaller than another bundle's."""

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        """Run every test on asyncio and on trio."""
        return str(request.param)

    @pytest.fixture
    def adapter(self) -> RuntimeAdapter:
        """The adapter under test: override this fixture."""
        pytest.fail("the conformance suite needs an 'adapter' fixture that builds your adapter")

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        """The runtime's hooks; the default has none (tests that need one skip)."""
        return ConformanceHarness()

    @pytest.fixture
    async def kit(
        self,
        adapter: RuntimeAdapter,
        harness: ConformanceHarness,
        request: pytest.FixtureRequest,
    ) -> AsyncIterator[Kit]:
        """The test's helper; it applies the capability gates, versions and xfails."""
        target = _target_version(adapter.info.api_version, self.conformance_version)
        name = request.node.originalname if hasattr(request.node, "originalname") else ""
        if name in self.xfail:
            request.applymarker(pytest.mark.xfail(reason=self.xfail[name], strict=True))
        marker = request.node.get_closest_marker("pando_since")
        if marker and parse_api_version(marker.args[0]) > parse_api_version(target):
            pytest.skip(f"added in conformance {marker.args[0]}; the adapter targets {target}")
        caps = await adapter.capabilities()
        needed = [c for mark in request.node.iter_markers("pando_requires") for c in mark.args]
        needed += _gate_of(type(self), request.function.__name__)
        for capability in needed:
            if not caps.supports(capability):
                pytest.skip(f"the adapter declares no {Capability(capability).value!r}")
        kit = Kit(adapter, harness, caps)
        try:
            yield kit
        finally:
            await kit.cleanup()
