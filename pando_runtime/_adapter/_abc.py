"""The adapter contract: :class:`RuntimeAdapter`, the one ABC every runtime implements.

Methods are grouped as in ``docs/contract.md``. The groups every adapter has
are abstract; gated groups have defaults that raise
:class:`CapabilityUnsupported`, so an adapter implements exactly what its
:meth:`RuntimeAdapter.capabilities` declares, and a newer library can add a
method without breaking older adapters.
"""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, ClassVar, Self

import anyio
from anyio.abc import ByteReceiveStream

from .._contract._capabilities import Capability, RuntimeCapabilities
from .._contract._capacity import BundleUsage, Capacity, Fit, InUse
from .._contract._edge import EdgePlan, EdgeState
from .._contract._errors import CapabilityUnsupported
from .._contract._events import BundleEvent
from .._contract._exec import ExecRequest, ExecResult, ExecSession
from .._contract._log_options import LogOptions
from .._contract._observed import ObservedBundle
from .._contract._plans import BundlePlan
from .._contract._refs import BundleHandle, BundleRef, DestroyOptions, Upstream, WorkloadRef
from .._contract._streams import read_all
from .._contract._trial import TrialRequest, TrialResult
from .._contract._volumes import VolumeHandle, VolumeRequest
from .._input._config import EmptyConfig, structure_config
from .._input._validation import check_not_before, check_plan
from .._replicas._membership import Membership
from .._replicas._settings import MembershipSettings
from ._info import AdapterInfo
from ._scope import read_scope

__all__ = ["RuntimeAdapter"]

_Observe = Callable[..., Awaitable[ObservedBundle]]


def _checking_inputs(observe: _Observe) -> _Observe:
    """``observe`` refusing a bad ``not_before`` (:class:`InvalidInput`) before it reads."""

    @functools.wraps(observe)
    async def checked(self: RuntimeAdapter, ref: BundleRef, **options: Any) -> ObservedBundle:
        check_not_before(options.get("not_before"))
        return await observe(self, ref, **options)

    checked.__pando_checks_inputs__ = True  # type: ignore[attr-defined]
    return checked


class RuntimeAdapter(abc.ABC):
    """A runtime that runs bundles, as a host sees it.

    Subclasses set :attr:`kind`, :attr:`description` and, when they have
    settings, :attr:`Config` (an attrs class made with :func:`setting`).
    Construct with a mapping or a ``Config``; I/O starts only when a method is
    awaited. Use as ``async with`` (or call :meth:`aclose`) to release threads,
    sockets and watches.
    """

    kind: ClassVar[str]
    """The adapter's registry name, for example ``"kubernetes"``."""
    api_version: ClassVar[str]
    """The adapter API version this class was written for (``"1.7"``; API 1.7). Set it to the
    version whose contract the adapter implements, never to ``pando_runtime.API_VERSION``
    (that is whatever core is installed). Unset, the entry point's ``AdapterInfo`` says it,
    else the adapter is taken as written for 1.0."""
    description: ClassVar[str] = ""
    Config: ClassVar[type[Any]] = EmptyConfig

    def __init__(self, config: Mapping[str, Any] | Any | None = None) -> None:
        self.config: Any = EmptyConfig()
        self.configure(config)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give the subclass's ``observe`` the contract's input check.

        Every adapter (and every wrapper of one) then refuses a bad ``not_before`` with
        :class:`InvalidInput` before it reads anything, without checking it itself.
        """
        super().__init_subclass__(**kwargs)
        observe = cls.__dict__.get("observe")
        if observe is not None and not getattr(observe, "__pando_checks_inputs__", False):
            setattr(cls, "observe", _checking_inputs(observe))  # noqa: B010 - mypy: a method

    # -- identity & health ------------------------------------------------------------------

    def configure(self, config: Mapping[str, Any] | Any | None) -> None:
        """Take settings; unknown keys or wrong types raise :class:`InvalidConfig`."""
        self.config = structure_config(type(self).Config, config)

    @classmethod
    def adapter_info(cls) -> AdapterInfo:
        """This adapter's :class:`AdapterInfo`, built from the class."""
        declared = getattr(cls, "api_version", None)
        return AdapterInfo(
            name=cls.kind,
            description=cls.description or (cls.__doc__ or "").strip().split("\n")[0],
            factory=f"{cls.__module__}:{cls.__qualname__}",
            config_class=cls.Config,
            **({"api_version": declared} if declared is not None else {}),
        )

    @property
    def info(self) -> AdapterInfo:
        """Name, description, API version and settings of this adapter.

        ``adapter.info.api_version`` is the version it was written for; a host asks
        :func:`pando_runtime.supports_api` whether that has what a version brought.
        """
        return self.adapter_info()

    @abc.abstractmethod
    async def health_check(self) -> None:
        """Check that the runtime can be used now; raise :class:`AdapterUnavailable` if not."""

    @abc.abstractmethod
    async def capabilities(self) -> RuntimeCapabilities:
        """What this adapter can do, as data."""

    async def aclose(self) -> None:  # noqa: B027 - adapters without resources need nothing
        """Release threads, sockets and watches. Safe to call twice."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- bundles ----------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        """Refuse ``plan`` as :meth:`apply` would, listing every problem; writes nothing.

        Raises :class:`InvalidPlan` (each problem with its path) or, for a good plan this
        runtime cannot run, :class:`CapabilityUnsupported`. The default checks the contract's
        rules against :meth:`capabilities`; an adapter with rules of its own checks them here
        too, in one pass, and its :meth:`apply` starts with this check (API 1.1).
        """
        check_plan(plan, await self.capabilities())

    @abc.abstractmethod
    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the runtime onto ``plan``; idempotent.

        An invalid plan raises :class:`InvalidPlan` (a plan beyond the
        capabilities :class:`CapabilityUnsupported`) before anything is written.
        A workload is replaced only when what it runs changed or it has ended.
        Raises :class:`CapacityExceeded` when the runtime has no room.
        """

    @abc.abstractmethod
    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        """Report the bundle's state; never remediate.

        Raises :class:`AdapterUnavailable` when the runtime cannot be read, so a
        host never mistakes an outage for a dead app. ``not_before`` (UTC): answer only
        with state confirmed at or after it (or after the call began, when it is later):
        the adapter waits for such a confirmation, or reads, and raises
        :class:`AdapterUnavailable` when it cannot get one within its read timeout.
        A ``not_before`` that is not a timezone-aware datetime raises :class:`InvalidInput`
        before anything is read; this class checks it for every subclass.
        """

    @abc.abstractmethod
    async def stop(self, ref: BundleRef) -> None:
        """Stop every running workload; keep volumes, config and finished logs."""

    @abc.abstractmethod
    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """Remove the bundle; its volumes are kept unless ``keep_volumes`` is false."""

    @abc.abstractmethod
    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """Where the host's proxy reaches ``port`` of a workload; computed, no I/O."""

    # -- capacity ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def capacity(self) -> Capacity:
        """What the runtime can give bundles now."""

    @abc.abstractmethod
    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        """The roomiest single place for ``bundle_id``, its own use counted free.

        ``None`` when the runtime is a single place (``capacity`` says it all).
        """

    async def usage(self, ref: BundleRef) -> BundleUsage:
        """What a bundle uses now (gate: ``reports_usage``)."""
        raise CapabilityUnsupported(Capability.REPORTS_USAGE)

    async def in_use(self) -> InUse:
        """What all bundles use now (gate: ``reports_usage``)."""
        raise CapabilityUnsupported(Capability.REPORTS_USAGE)

    def read_scope(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Within this scope an expensive read serves every question (see ``_scope``)."""
        return read_scope()

    # -- events -----------------------------------------------------------------------------

    def watch_bundles(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[BundleEvent]]:
        """Open a stream of :class:`BundleEvent` (gate: ``bundle_events``).

        ``async with adapter.watch_bundles() as events: async for event in events``.
        The first event is ``WATCHING``; ``MISSED`` means resync. A lost stream
        raises :class:`AdapterUnavailable`; open a new one and resync.
        """
        raise CapabilityUnsupported(Capability.BUNDLE_EVENTS)

    # -- logs and exec ----------------------------------------------------------------------

    @abc.abstractmethod
    def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        """The log of the workload's newest instance, a finished one included.

        ``async with adapter.logs(ref) as stream: async for chunk in stream``.
        Raises :class:`NotFound` when the workload has no instance.
        """

    def exec(
        self, ref: WorkloadRef, request: ExecRequest
    ) -> contextlib.AbstractAsyncContextManager[ExecSession]:
        """Run a command in a running workload (gate: ``exec``)."""
        raise CapabilityUnsupported(Capability.EXEC)

    async def run(
        self, ref: WorkloadRef, request: ExecRequest, *, stdin: bytes | None = None
    ) -> ExecResult:
        """Run a command to its end and collect its output (gate: ``exec``).

        ``stdin`` bytes are written to the command, then end-of-file.
        """
        if stdin is not None and not request.stdin:
            request = ExecRequest(
                command=request.command, tty=request.tty, stdin=True, env=request.env
            )
        async with self.exec(ref, request) as session:
            outputs: dict[str, bytes] = {}

            async def collect(name: str, stream: ByteReceiveStream) -> None:
                outputs[name] = await read_all(stream)

            async with anyio.create_task_group() as group:
                group.start_soon(collect, "stdout", session.stdout)
                group.start_soon(collect, "stderr", session.stderr)
                if session.stdin is not None:
                    if stdin:
                        await session.stdin.send(stdin)
                    await session.stdin.aclose()
            exit_code = await session.wait()
        return ExecResult(exit_code=exit_code, stdout=outputs["stdout"], stderr=outputs["stderr"])

    # -- volumes ----------------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """Create a volume, or return the existing one (gate: ``persistent_volumes``)."""
        raise CapabilityUnsupported(Capability.PERSISTENT_VOLUMES)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        """Delete a volume and its data (gate: ``persistent_volumes``)."""
        raise CapabilityUnsupported(Capability.PERSISTENT_VOLUMES)

    def snapshot_volume(
        self, handle: VolumeHandle
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        """The volume's contents as a tar stream (gate: ``persistent_volumes``)."""
        raise CapabilityUnsupported(Capability.PERSISTENT_VOLUMES)

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        """Replace the volume's contents, in place, with a tar stream.

        Gate: ``persistent_volumes``. The volume is created when absent.
        """
        raise CapabilityUnsupported(Capability.PERSISTENT_VOLUMES)

    # -- images -----------------------------------------------------------------------------

    async def has_image(self, reference: str) -> bool:
        """Whether the runtime can start ``reference`` without importing it first.

        Registry-only runtimes answer true: they pull on start.
        """
        return True

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """Load an image archive; returns its immutable reference (gate: ``image_import``)."""
        raise CapabilityUnsupported(Capability.IMAGE_IMPORT)

    # -- trial ------------------------------------------------------------------------------

    async def trial(self, request: TrialRequest) -> TrialResult:
        """Run an image once in isolation and report what it did (gate: ``trial_run``)."""
        raise CapabilityUnsupported(Capability.TRIAL_RUN)

    # -- edge -------------------------------------------------------------------------------

    async def apply_edge(self, plan: EdgePlan) -> None:
        """Converge the edge called ``plan.name`` (gate: ``edge``)."""
        raise CapabilityUnsupported(Capability.EDGE)

    async def observe_edge(self, name: str) -> EdgeState:
        """Whether the edge is serving, and why not in plain words (gate: ``edge``)."""
        raise CapabilityUnsupported(Capability.EDGE)

    async def remove_edge(self, name: str) -> None:
        """Remove everything the edge made (gate: ``edge``)."""
        raise CapabilityUnsupported(Capability.EDGE)

    async def edges(self) -> tuple[str, ...]:
        """Names of the edges this adapter runs (gate: ``edge``)."""
        raise CapabilityUnsupported(Capability.EDGE)

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """Volumes the edges mount, for backups (gate: ``edge``)."""
        raise CapabilityUnsupported(Capability.EDGE)

    # -- membership -------------------------------------------------------------------------

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """Join the host replicas sharing this runtime, as ``replica`` (gate: ``membership``).

        ``async with adapter.membership(replica="a") as membership:``; within the block
        ``apply``, ``stop`` and ``destroy`` of a bundle another replica owns raise
        :class:`NotOwner` (unless under ``membership.override(...)``). An adapter that
        never joins writes as before.
        """
        raise CapabilityUnsupported(Capability.MEMBERSHIP)
