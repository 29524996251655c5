"""Service catalogs: what a registration is, what a catalog backend and a syncer offer.

A *source* (the bundles of any adapter, a cluster's Services, a host's own list) works
out the whole set of registrations that should be in a catalog and hands it to a
:class:`Syncer`; the syncer keeps a :class:`CatalogBackend` (Consul, an in-memory one
for tests, a plugin) equal to it. Backends are plugins of their own entry-point group
(``pando_runtime.catalogs``), described by a light :class:`CatalogInfo`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from .._input._config import ConfigField, EmptyConfig, config_fields, config_json_schema
from .._plugins._kinds import install_hint
from .._util._frozen import frozen_mapping

if TYPE_CHECKING:
    from .._contract._errors import PandoRuntimeError

__all__ = [
    "CATALOG_NODE",
    "BatchCatalogBackend",
    "CatalogBackend",
    "CatalogInfo",
    "CatalogRegistration",
    "CatalogWrite",
    "Syncer",
]

CATALOG_NODE = "pando-runtime"
"""The synthetic node registrations are made under unless a source names another."""


def _tuple_of_str(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


@attrs.frozen(kw_only=True)
class CatalogRegistration:
    """One service instance as a catalog lists it.

    ``service_id`` is unique within ``node``; ``(node, service_id)`` is the key a syncer
    compares by. ``node`` is a synthetic node, not an agent: a catalog that runs agents
    (Consul) would otherwise remove a service whose agent does not know it.
    """

    service: str
    service_id: str
    address: str
    port: int
    tags: tuple[str, ...] = attrs.field(default=(), converter=_tuple_of_str)
    metadata: Mapping[str, str] = attrs.field(factory=dict, converter=frozen_mapping)
    node: str = CATALOG_NODE

    @property
    def key(self) -> tuple[str, str]:
        """``(node, service_id)``: what identifies the registration in its catalog."""
        return (self.node, self.service_id)


@attrs.frozen
class CatalogWrite:
    """One write of a batch: ``registration`` created or replaced, or removed if ``remove``.

    A removal carries the registration as last read from the catalog: a catalog may need
    more than its key to remove it (Consul checks the token's right on the service name).
    """

    registration: CatalogRegistration
    remove: bool = attrs.field(default=False, kw_only=True)

    @property
    def key(self) -> tuple[str, str]:
        """``(node, service_id)``: the registration written."""
        return self.registration.key


@runtime_checkable
class Syncer(Protocol):
    """Where a source hands its registrations: always the whole desired set."""

    async def sync(self, registrations: Iterable[CatalogRegistration]) -> None:
        """Make ``registrations`` the whole desired set (what is not in it is not desired).

        Returns once the set is taken; it is written to the catalog in the background.
        """
        ...


@runtime_checkable
class CatalogBackend(Protocol):
    """A service catalog, spoken to through four calls.

    A backend does no bookkeeping of its own: the syncer decides what to write, reads a
    node's registrations in one call per node, and counts every call. Every method raises
    :class:`~pando_runtime.catalog.CatalogUnavailable` when the catalog cannot be reached or
    refuses a call.
    """

    async def node_services(self, node: str) -> Sequence[CatalogRegistration]:
        """Every registration of ``node``, whoever made it (empty for an unknown node)."""
        ...

    async def register(self, registration: CatalogRegistration) -> None:
        """Create or replace ``registration`` (its node is created when missing)."""
        ...

    async def deregister(self, node: str, service_id: str) -> None:
        """Remove one registration (no error when it is already gone)."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class BatchCatalogBackend(CatalogBackend, Protocol):
    """A :class:`CatalogBackend` that also writes many registrations in few requests.

    Optional: a syncer uses :meth:`write_batch` when a backend has it, and the single
    calls (``register``, ``deregister``, several in flight) when it has not, so a backend
    written for the four calls keeps working unchanged.
    """

    batch_limit: int
    """The most writes the syncer hands to one :meth:`write_batch` call (at least 1)."""

    async def write_batch(
        self, writes: Sequence[CatalogWrite]
    ) -> Mapping[tuple[str, str], PandoRuntimeError]:
        """Apply ``writes`` (each key at most once); the error of each write not applied.

        Every write whose key is not in the answer was applied. A write the catalog
        refuses (an invalid registration) must not hold the others back: it is answered
        with :class:`~pando_runtime.catalog.CatalogRefused`, the others are applied. Raises
        :class:`~pando_runtime.catalog.CatalogUnavailable` when the catalog cannot be
        reached; writes are idempotent, so the syncer retries them all.
        """
        ...


@attrs.frozen(kw_only=True)
class CatalogInfo:
    """A catalog backend's name, description, settings and where its code lives.

    A plugin points its ``pando_runtime.catalogs`` entry point at a ``CatalogInfo`` kept
    in a light module, so that listing catalogs imports no client library. ``factory`` is
    the ``"module:attr"`` of a callable taking the structured config and returning a
    :class:`CatalogBackend`.
    """

    name: str
    description: str
    factory: str
    config_class: type[Any] = attrs.field(default=EmptyConfig, eq=False)
    distribution: str | None = None
    problem: str | None = None
    """Set by ``available_catalogs`` when the backend is listed but cannot load."""

    @property
    def config_fields(self) -> tuple[ConfigField, ...]:
        """The backend's settings (key, type, help, default, required, secret)."""
        return config_fields(self.config_class)

    def config_schema(self) -> dict[str, Any]:
        """A JSON Schema of the backend's settings, for host UIs."""
        return config_json_schema(self.config_class, title=f"{self.name} catalog settings")

    @property
    def hint(self) -> str:
        """What to run to install this backend's code."""
        return install_hint(self.distribution, "catalog backend")
