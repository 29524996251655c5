"""An in-memory catalog backend for host tests: inspectable, editable, and able to fail."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import anyio

from .._contract._errors import CatalogUnavailable
from .._input._config import EmptyConfig
from ..catalog._types import CatalogInfo, CatalogRegistration

__all__ = ["MEMORY_CATALOG", "MemoryCatalog", "memory_catalog"]


class MemoryCatalog:
    """A :class:`~pando_runtime.catalog.CatalogBackend` that keeps registrations in a dict.

    Beyond the protocol, a test can edit it behind the syncer's back (:meth:`put`,
    :meth:`remove`), read what it holds (:attr:`registrations`, :meth:`services`), count
    calls (:attr:`calls`) and make it unreachable (:attr:`down`). Each call yields to the
    event loop once, as a network call would.
    """

    def __init__(self) -> None:
        self.registrations: dict[tuple[str, str], CatalogRegistration] = {}
        self.calls: Counter[str] = Counter()
        self.down = False
        """While true every call raises :class:`~pando_runtime.catalog.CatalogUnavailable`."""
        self.closed = False

    async def _enter(self, method: str) -> None:
        await anyio.lowlevel.checkpoint()
        self.calls[method] += 1
        if self.down:
            raise CatalogUnavailable(
                "the in-memory catalog is down", details={"catalog": "memory", "call": method}
            )

    async def node_services(self, node: str) -> Sequence[CatalogRegistration]:
        """Every registration of ``node``."""
        await self._enter("node_services")
        return [r for (n, _), r in self.registrations.items() if n == node]

    async def register(self, registration: CatalogRegistration) -> None:
        """Create or replace ``registration``."""
        await self._enter("register")
        self.registrations[registration.key] = registration

    async def deregister(self, node: str, service_id: str) -> None:
        """Remove one registration (no error when it is gone)."""
        await self._enter("deregister")
        self.registrations.pop((node, service_id), None)

    async def aclose(self) -> None:
        """Nothing to release."""
        self.closed = True

    # -- test controls --------------------------------------------------------------------

    def put(self, registration: CatalogRegistration) -> None:
        """Write ``registration`` directly, as someone else would (not counted)."""
        self.registrations[registration.key] = registration

    def remove(self, node: str, service_id: str) -> None:
        """Remove a registration directly (not counted)."""
        self.registrations.pop((node, service_id), None)

    def services(self) -> Mapping[str, list[CatalogRegistration]]:
        """Registrations by service name."""
        out: dict[str, list[CatalogRegistration]] = {}
        for registration in self.registrations.values():
            out.setdefault(registration.service, []).append(registration)
        return out


def memory_catalog(config: EmptyConfig) -> MemoryCatalog:  # noqa: ARG001 - no settings
    """The factory ``load_catalog("memory")`` calls."""
    return MemoryCatalog()


MEMORY_CATALOG = CatalogInfo(
    name="memory",
    description="An in-memory catalog for tests (pando_runtime.testing.MemoryCatalog).",
    factory="pando_runtime.testing._memory_catalog:memory_catalog",
)
