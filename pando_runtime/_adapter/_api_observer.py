"""What an adapter tells about the calls it makes to its runtime's own API.

An adapter that talks to an API (the Kubernetes adapter, to the API server) reports each call,
each restart of a watch and what it holds (cached objects, open watches) to an
:class:`ApiObserver`. The adapter knows nothing of how they are recorded: :func:`instrument`
gives it an observer that turns them into OpenTelemetry metrics (the only binding, in
``_telemetry``); until then it reports to :data:`NO_API_OBSERVER`, which does nothing.

An adapter offers this by having ``observe_api`` (:class:`ObservableApi`); it is no part of
the contract, and an adapter without an API of its own (the fake) needs none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import attrs

__all__ = ["NO_API_OBSERVER", "ApiObserver", "ApiState", "ApiStateSource", "ObservableApi"]


@attrs.frozen
class ApiState:
    """What an adapter holds now: objects in its cache and open watches, by resource."""

    cached_objects: Mapping[str, int] = attrs.field(factory=dict)
    open_watches: Mapping[str, int] = attrs.field(factory=dict)


class ApiStateSource(Protocol):
    """What an observer reads an :class:`ApiState` from, when asked (an exporter's scrape)."""

    def api_state(self) -> ApiState:
        """The state now; cheap, no I/O."""
        ...


class ApiObserver(Protocol):
    """Where an adapter reports its API calls; every method is cheap and never raises."""

    def call(self, verb: str, resource: str, status: int, seconds: float) -> None:
        """One call: its verb, resource, the status answered and how long it took.

        ``verb`` as the runtime names it (``get``, ``list``, ``watch``, ``patch``...);
        ``status`` 0 when nothing answered.
        """
        ...

    def watch_restarted(self, resource: str, reason: str) -> None:
        """The watch of ``resource`` started over, for ``reason``.

        ``gone`` (its version was too old), ``error`` (it failed and backs off) or
        ``requested``.
        """
        ...

    def track(self, source: ApiStateSource) -> None:
        """Report ``source``'s state from now on, for as long as it lives."""
        ...

    def bind(self, **attributes: str) -> ApiObserver:
        """This observer, naming ``attributes`` (``cluster="eu-1"``) with all it reports."""
        ...


@runtime_checkable
class ObservableApi(Protocol):
    """An adapter that reports its API calls (see :class:`ApiObserver`)."""

    def observe_api(self, observer: ApiObserver) -> None:
        """Report to ``observer`` from now on."""
        ...


class _Unobserved:
    """Reports nowhere."""

    def call(self, verb: str, resource: str, status: int, seconds: float) -> None:
        pass

    def watch_restarted(self, resource: str, reason: str) -> None:
        pass

    def track(self, source: ApiStateSource) -> None:
        pass

    def bind(self, **attributes: str) -> ApiObserver:
        return self


NO_API_OBSERVER: ApiObserver = _Unobserved()
"""The observer of an adapter nobody observes: it does nothing."""
