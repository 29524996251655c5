"""The one error hierarchy of pando-runtime.

Every error carries a stable ``code`` (documented in ``docs/errors.md``), a
human ``message``, a ``remedy`` that tells the reader what to do, and
``details`` (JSON-able data). Hosts branch on the class or the code, never on
the message::

    PandoRuntimeError
    ├── AdapterUnavailable      the runtime cannot be read (API down, canary failed)
    ├── AdapterFailed           a write to the runtime failed
    ├── CapabilityUnsupported   also NotImplementedError
    ├── CapacityExceeded        no room for the plan
    ├── InvalidInput            also ValueError; lists every problem with its path
    │   ├── InvalidPlan
    │   └── InvalidConfig
    ├── NotFound                also LookupError
    │   ├── UnknownAdapter
    │   └── UnknownCatalog
    ├── AdapterNotInstalled     an adapter's distribution or extra is missing
    ├── CatalogNotInstalled     a catalog backend's distribution is missing
    ├── CatalogUnavailable      a service catalog cannot be reached or refused a call
    │   └── CatalogRefused      it refused one registration of a batch (the others written)
    ├── IncompatibleAdapter     the adapter was built for another API version
    ├── NotOwner                another replica owns the bundle (or singleton) written
    └── RateLimited             with ``retry_after`` seconds
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import attrs

__all__ = [
    "AdapterFailed",
    "AdapterNotInstalled",
    "AdapterUnavailable",
    "CapabilityUnsupported",
    "CapacityExceeded",
    "CatalogNotInstalled",
    "CatalogRefused",
    "CatalogUnavailable",
    "IncompatibleAdapter",
    "InvalidConfig",
    "InvalidInput",
    "InvalidPlan",
    "NotFound",
    "NotOwner",
    "PandoRuntimeError",
    "Problem",
    "RateLimited",
    "StillStopping",
    "UnknownAdapter",
    "UnknownCatalog",
]


@attrs.frozen
class Problem:
    """One thing wrong with an input, located by its path.

    ``path`` reads like the expression that reaches the value, for example
    ``workloads[1].ports[0].number``; an empty path is the input as a whole.
    """

    path: str
    message: str
    code: str = "invalid"
    capability: str | None = None
    """Set when the problem is a capability the runtime lacks."""

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class PandoRuntimeError(Exception):
    """Base of every error this library raises on purpose."""

    code: ClassVar[str] = "RUNTIME_ERROR"
    default_remedy: ClassVar[str] = "See the details; report a bug if the cause is unclear."

    def __init__(
        self,
        message: str,
        *,
        remedy: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.remedy = remedy or self.default_remedy
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return f"[{self.code}] {self.message} (remedy: {self.remedy})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON envelope a host can pass on to its own clients."""
        return {
            "code": self.code,
            "message": self.message,
            "remedy": self.remedy,
            "details": self.details,
        }


class AdapterUnavailable(PandoRuntimeError):
    """The runtime cannot be read: its API is down, a read failed, a canary failed.

    A host treats this as a platform outage, never as an app failure.
    """

    code = "ADAPTER_UNAVAILABLE"
    default_remedy = "Check that the runtime is reachable and healthy, then retry."


class AdapterFailed(PandoRuntimeError):
    """A write to the runtime failed, or the runtime refused it."""

    code = "ADAPTER_FAILED"
    default_remedy = "Check the runtime's state and the details, then apply again."


class StillStopping(PandoRuntimeError):
    """An old instance of a workload was still ending when ``apply`` would start its successor.

    ``apply`` waits (up to the adapter's bound) for instances told to end (by ``stop``,
    ``destroy``) to have ended before it starts new ones, so two never serve at once; past
    the bound it raises this and starts nothing in their place. ``details`` name the
    ``bundle_id`` and the ``workloads`` still stopping.
    """

    code = "STILL_STOPPING"
    default_remedy = (
        "Wait until observe no longer reports the workloads stopping (the app's graceful "
        "shutdown is taking long), then apply again."
    )


class CapabilityUnsupported(PandoRuntimeError, NotImplementedError):
    """The adapter was asked for something its capabilities say it cannot do."""

    code = "CAPABILITY_UNSUPPORTED"
    default_remedy = "Check adapter.capabilities() at plan time and avoid this feature here."

    def __init__(
        self,
        capability: str,
        message: str | None = None,
        *,
        remedy: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.capability = str(capability)  # a Capability (a str enum) reads as its value
        merged = {"capability": self.capability, **(details or {})}
        super().__init__(
            message or f"this adapter does not support {self.capability!r}",
            remedy=remedy,
            details=merged,
        )


class CapacityExceeded(PandoRuntimeError):
    """The runtime has no room for what was asked."""

    code = "CAPACITY_EXCEEDED"
    default_remedy = "Lower the plan's resources, free capacity or add capacity to the runtime."


class InvalidInput(PandoRuntimeError, ValueError):
    """Input was refused before anything was written; ``problems`` lists every fault."""

    code = "INVALID_INPUT"
    default_remedy = "Fix each listed problem at its path and try again."

    def __init__(
        self,
        message: str,
        problems: Iterable[Problem] = (),
        *,
        remedy: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        merged = {
            "problems": [attrs.asdict(p) for p in self.problems],
            **(details or {}),
        }
        if self.problems:
            listed = "; ".join(str(p) for p in self.problems)
            message = f"{message}: {listed}"
        super().__init__(message, remedy=remedy, details=merged)


class InvalidPlan(InvalidInput):
    """A bundle, volume, edge, trial or exec request is not valid."""

    code = "INVALID_PLAN"
    default_remedy = "Fix each listed problem in the plan; nothing was written."


class InvalidConfig(InvalidInput):
    """An adapter's configuration is not valid."""

    code = "INVALID_CONFIG"
    default_remedy = "Fix each listed configuration key; see the adapter's config fields."


class NotFound(PandoRuntimeError, LookupError):
    """The thing named does not exist in the runtime."""

    code = "NOT_FOUND"
    default_remedy = "Check the name; the app or workload may not be deployed."


class UnknownAdapter(NotFound):
    """No adapter of that name is installed or registered."""

    code = "ADAPTER_NOT_FOUND"
    default_remedy = "Install the adapter's distribution or pick one of the installed adapters."


class AdapterNotInstalled(PandoRuntimeError, ImportError):
    """The adapter is registered but its code or a dependency cannot be imported."""

    code = "ADAPTER_NOT_INSTALLED"
    default_remedy = "Install the adapter's distribution with its dependencies."


class IncompatibleAdapter(PandoRuntimeError):
    """The adapter was written for an API version this library does not speak."""

    code = "ADAPTER_INCOMPATIBLE"
    default_remedy = "Install a version of the adapter built for this pando-runtime API."


class RateLimited(PandoRuntimeError):
    """The runtime (or a registry behind it) throttled us; retry after ``retry_after`` s."""

    code = "RATE_LIMITED"
    default_remedy = "Wait for the given time, then retry."

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        remedy: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(
            message, remedy=remedy, details={"retry_after": retry_after, **(details or {})}
        )


class UnknownCatalog(NotFound):
    """No catalog backend of that name is installed or registered."""

    code = "CATALOG_NOT_FOUND"
    default_remedy = "Install the backend's distribution or pick one of the installed catalogs."


class CatalogNotInstalled(PandoRuntimeError, ImportError):
    """The catalog backend is registered but its code or a dependency cannot be imported."""

    code = "CATALOG_NOT_INSTALLED"
    default_remedy = "Install the distribution that provides the catalog backend."


class CatalogUnavailable(PandoRuntimeError):
    """A service catalog cannot be reached, or it refused a call.

    A syncer retries with backoff and keeps its desired set; hosts see it in the
    syncer's status.
    """

    code = "CATALOG_UNAVAILABLE"
    default_remedy = "Check the catalog's address and that it is up; the syncer retries."


class CatalogRefused(CatalogUnavailable):
    """The catalog refused one write of a batch, which it found invalid; the others landed.

    ``details`` name the ``node`` and ``service_id`` and say what the catalog answered.
    A syncer reports it as a ``failed`` change and tries again on later passes (a backoff
    apart), without holding the other registrations back.
    """

    code = "CATALOG_REFUSED"
    default_remedy = (
        "Fix the registration the catalog names (its metadata, address or name) at its "
        "source; the other registrations are written meanwhile."
    )


class NotOwner(PandoRuntimeError):
    """This replica of the host may not write that: another replica owns it.

    Raised only for a replica that joined a membership: a write (``apply``, ``stop``,
    ``destroy``) for a bundle it does not own, or a singleton it no longer holds.
    ``details`` name the ``replica``, the ``bundle_id`` (or ``singleton``) and the
    ``owner`` (``None`` when this replica cannot tell: its own lease is not renewed).
    """

    code = "NOT_OWNER"
    default_remedy = (
        "Leave this bundle to its owner (membership.owner(bundle_id)); to write it anyway, "
        "write under membership.override(bundle_id)."
    )
