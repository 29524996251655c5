"""An adapter written for an older minor of the adapter API, as today's contract has it.

A minor only adds, but what it adds an older plugin cannot say: it never declared a parameter
that came later, never reported what a later minor made a promise, never set a field whose
default later became a security gate. :class:`VersionedAdapter` is the one place the core
adapts to that, from the version the plugin declares and from its own signatures, never by
trusting it to know what came after it. What changes, by the version that brought it:

- 1.1, ``observe(ref, not_before=...)``: an implementation that does not declare
  ``not_before`` is never handed it; asked for a confirmed answer it cannot give, the wrapper
  raises :class:`CapabilityUnsupported` (``confirmed_observe``), which its capabilities
  declare false.
- 1.3, ``stopping``: an adapter written before it answers "gone" as soon as it told the
  runtime to end an instance. Each of its answers says ``stopping_reported=False`` and its
  capabilities ``stopping_observed=False``: ``exists=False`` does not promise nothing runs.
- 1.5, the isolation floor: ``isolation_class`` defaulted to ``container`` before it was a
  gate, so an older adapter that left it there claims nothing: it is taken as ``process``
  (no isolation), and a plan or trial asking for more is refused here, before its ``apply``
  or ``trial`` writes anything. A class the adapter set to something else stands.

An adapter written for the current minor is never wrapped (:func:`versioned`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs

from .._contract._capabilities import Capability, IsolationClass, RuntimeCapabilities
from .._contract._errors import CapabilityUnsupported
from .._contract._observed import ObservedBundle
from .._contract._plans import BundlePlan
from .._contract._refs import BundleHandle, BundleRef
from .._contract._trial import TrialRequest, TrialResult
from .._contract._version import API_VERSION, api_at_least
from .._input._validation import check_plan, raise_problems, validate_trial
from ._abc import RuntimeAdapter
from ._delegating import DelegatingAdapter
from ._info import AdapterInfo

__all__ = ["VersionedAdapter", "declares_parameter", "supports_api", "versioned"]


@functools.cache
def _parameters(function: Callable[..., Any]) -> frozenset[str] | None:
    """The parameter names ``function`` declares; ``None`` when it takes any keyword."""
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters)


def declares_parameter(method: Callable[..., Any], name: str) -> bool:
    """Whether ``method`` (bound or not) takes a keyword ``name`` (``**kwargs`` counts)."""
    function = getattr(method, "__func__", method)
    declared = _parameters(function)
    return declared is None or name in declared


class VersionedAdapter(DelegatingAdapter):
    """An adapter written for adapter API ``api_version``, older than the current one.

    Made by :func:`versioned` (``load_adapter`` does it); :attr:`adapter` is the plugin's own
    adapter. Everything the plugin's minor already had is forwarded unchanged; see the module
    for what is adapted.
    """

    def __init__(self, adapter: RuntimeAdapter, info: AdapterInfo) -> None:
        super().__init__(adapter)
        self._info = info
        self._observe_takes_not_before = declares_parameter(adapter.observe, "not_before")
        # What the plugin's minor could say, decided once (observe is a hot path).
        self._confirms = self._observe_takes_not_before and api_at_least(info.api_version, "1.1")
        self._reports_stopping = api_at_least(info.api_version, "1.3")
        self._knows_isolation = api_at_least(info.api_version, "1.5")

    @property
    def info(self) -> AdapterInfo:
        """The plugin's info, with the API version it was written for."""
        return self._info

    async def capabilities(self) -> RuntimeCapabilities:
        """The plugin's capabilities, less what its minor could not promise."""
        caps = await self.adapter.capabilities()
        changes: dict[str, Any] = {}
        if not self._confirms:
            changes["confirmed_observe"] = False
        if not self._reports_stopping:
            changes["stopping_observed"] = False
        if not self._knows_isolation and caps.isolation_class is IsolationClass.CONTAINER:
            changes["isolation_class"] = IsolationClass.PROCESS
        return attrs.evolve(caps, **changes) if changes else caps

    # -- plans and trials: the isolation floor the plugin's own checks never knew ------------

    async def check_plan(self, plan: BundlePlan) -> None:
        """The contract's rules against the adapted capabilities, then the plugin's own."""
        await self._check_floor(plan)
        await self.adapter.check_plan(plan)

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """The plugin's apply, after the checks it could not make itself."""
        await self._check_floor(plan)
        return await self.adapter.apply(plan)

    async def _check_floor(self, plan: BundlePlan) -> None:
        """The plan against the adapted capabilities, for a plugin that never knew the floor."""
        if not self._knows_isolation:
            check_plan(plan, await self.capabilities())

    async def trial(self, request: TrialRequest) -> TrialResult:
        """The plugin's trial, after the isolation floor is checked against what it runs.

        A plugin that runs no trials says so itself (``CapabilityUnsupported``, ``trial_run``).
        """
        if not self._knows_isolation:
            caps = await self.capabilities()
            if caps.trial_run:
                raise_problems(validate_trial(request, caps), "trial")
        return await self.adapter.trial(request)

    # -- observe ------------------------------------------------------------------------------

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        """The plugin's answer, handed only what it declares, marked with what it cannot say."""
        if not_before is not None and not self._confirms:
            raise CapabilityUnsupported(
                Capability.CONFIRMED_OBSERVE,
                f"adapter {self._info.name!r} was written for adapter API "
                f"{self._info.api_version}: it cannot answer with state confirmed since a "
                "given time (observe's not_before came with 1.1)",
                remedy="observe without not_before, or upgrade the adapter to one written "
                "for adapter API 1.1 or later",
                details={"adapter": self._info.name, "api_version": self._info.api_version},
            )
        if self._observe_takes_not_before:
            observed = await self.adapter.observe(ref, not_before=not_before)
        else:
            observed = await self.adapter.observe(ref)
        if self._reports_stopping:
            return observed
        return attrs.evolve(observed, stopping_reported=False)


def versioned(adapter: RuntimeAdapter, info: AdapterInfo) -> RuntimeAdapter:
    """``adapter`` as the current contract has it, given the ``info`` it was loaded by.

    An adapter whose class declares the current version and agrees with ``info`` comes back
    as it is; any other is wrapped in a :class:`VersionedAdapter` carrying ``info``'s version
    (so ``adapter.info.api_version`` is what the plugin declared).
    """
    own = type(adapter).adapter_info()
    if info.api_version == API_VERSION == own.api_version:
        return adapter
    wrapper = _versioned_class(type(adapter))
    return wrapper(adapter, attrs.evolve(own, name=info.name, api_version=info.api_version))


@functools.cache
def _versioned_class(cls: type[RuntimeAdapter]) -> type[VersionedAdapter]:
    """A :class:`VersionedAdapter` with ``cls``'s kind, description and settings."""
    attributes = {"kind": cls.kind, "description": cls.description, "Config": cls.Config}
    return type(f"Versioned{cls.__name__}", (VersionedAdapter,), attributes)


def supports_api(adapter: RuntimeAdapter, version: str) -> bool:
    """Whether ``adapter`` was written for adapter API ``version`` or a later minor of it.

    A host asks before relying on what ``version`` brought, as the adapter gives it itself::

        if pr.supports_api(runtime, "1.3"):  # its "gone" means nothing still runs
            ...

    ``version`` is ``"MAJOR.MINOR"``; anything else raises ``ValueError``. For an adapter
    loaded by :func:`~pando_runtime.load_adapter` this reads the version its plugin declared
    (one that declared none is taken as 1.0). A fleet is the core's own: ask its answers
    (``ObservedBundle.stopping_reported``) or its capabilities for what its members give.
    """
    return api_at_least(adapter.info.api_version, version)
