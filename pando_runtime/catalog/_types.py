"""Service catalogs: what a registration is, what a catalog backend and a syncer offer.

A *source* (the bundles of any adapter, a cluster's Services, a host's own list) works
out the whole set of registrations that should be in a catalog and hands it to a
:class:`Syncer`; the syncer keeps a :class:`CatalogBackend` (Consul, an in-memory one
for tests, a plugin) equal to it. Backends are plugins of their own entry-point group
(``pando_runtime.catalogs``), described by a light :class:`CatalogInfo`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from .._input._config import ConfigField, EmptyConfig, config_fields, config_json_schema
from .._plugins._kinds import install_hint
from .._util._frozen import frozen_mapping

__all__ = [
    "CATALOG_NODE",
    "CatalogBackend",
    "CatalogInfo",
    "CatalogRegistration",
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
