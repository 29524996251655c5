"""Lease stores loaded by name: the lease-store kind of plugin.

A lease store keeps the leases a :class:`~pando_runtime.Membership` needs where the runtime
has no lease API of its own (PostgreSQL, Consul KV, etcd, a plugin). Stores come from the
entry-point group ``pando_runtime.lease_stores`` and :func:`register_lease_store`, later ones
winning; each target names a light :class:`LeaseStoreInfo`, resolved on use, so listing stores
imports no database driver. The mechanism is every plugin kind's (:class:`PluginKind`); what is
the stores' own is here: the declared API version and the settings, checked before the
store's code is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from ._contract._errors import InvalidConfig, NotFound, PandoRuntimeError, Problem
from ._contract._version import API_VERSION, api_compatible
from ._input._config import (
    ConfigField,
    EmptyConfig,
    config_fields,
    config_json_schema,
    setting,
    structure_config,
)
from ._plugins._kinds import PluginKind, install_hint
from ._replicas._leases import LeaseStore, StoredLease

__all__ = [
    "LEASE_STORE_ENTRY_POINT_GROUP",
    "LeaseStoreClient",
    "LeaseStoreInfo",
    "LeaseStoreNotInstalled",
    "LeaseStoreSetting",
    "UnknownLeaseStore",
    "available_lease_stores",
    "lease_store_problems",
    "load_lease_store",
    "register_lease_store",
]

LEASE_STORE_ENTRY_POINT_GROUP = "pando_runtime.lease_stores"

LEASE_STORE_API_VERSION = "1.7"
"""The adapter API minor the lease-store kind came with: a store that declares nothing is
taken as written for it (no store is older)."""


class UnknownLeaseStore(NotFound):
    """No lease store of that name is installed or registered."""

    code = "LEASE_STORE_NOT_FOUND"
    default_remedy = "Install the store's distribution or pick one of the installed lease stores."


class LeaseStoreNotInstalled(PandoRuntimeError, ImportError):
    """The lease store is registered but cannot load: its code, a dependency, its API version."""

    code = "LEASE_STORE_NOT_INSTALLED"
    default_remedy = "Install the distribution that provides the lease store."


@runtime_checkable
class LeaseStoreClient(LeaseStore, Protocol):
    """A lease store loaded by name: the calls of :class:`LeaseStore`, ``read_lease``, ``aclose``.

    The host owns it: call :meth:`aclose` once done (``contextlib.aclosing``). ``read_lease``
    is the kind's own (an adapter's membership store, :class:`LeaseStore`, needs none).
    """

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        """The lease ``name`` of ``group``; ``None`` when there is none.

        One call of the store whatever the group holds, under the same rules as every call:
        it sees every finished write (a lease ``list_leases`` would list, and nothing else).
        """
        ...

    async def aclose(self) -> None:
        """Release its connections; the store's leases stay."""
        ...


@attrs.frozen(kw_only=True)
class LeaseStoreInfo:
    """A lease store's name, description, API version, settings and where its code lives.

    A plugin points its ``pando_runtime.lease_stores`` entry point at a ``LeaseStoreInfo``
    kept in a light module (attrs only). ``factory`` is the ``"module:attr"`` of a callable
    taking the structured settings and returning a :class:`LeaseStoreClient`. ``api_version``
    is the adapter API version the store was written for, as an adapter declares it (by
    default 1.7, the version the kind came with: no store is older); one declaring another
    major, or a minor newer than the core's, is refused. ``reads`` says how
    the store's reads see every finished write (the rule every store keeps).
    """

    name: str
    description: str
    factory: str
    config_class: type[Any] = attrs.field(default=EmptyConfig, eq=False)
    api_version: str = LEASE_STORE_API_VERSION
    reads: str = ""
    distribution: str | None = None
    problem: str | None = None
    """Set by ``available_lease_stores`` when the store is listed but cannot load."""

    @property
    def config_fields(self) -> tuple[ConfigField, ...]:
        """The store's settings (key, type, help, default, required, secret)."""
        return config_fields(self.config_class)

    def config_schema(self) -> dict[str, Any]:
        """A JSON Schema of the store's settings, for host UIs."""
        return config_json_schema(self.config_class, title=f"{self.name} lease store settings")

    @property
    def hint(self) -> str:
        """What to run to install this store's code."""
        return install_hint(self.distribution, "lease store")


LEASE_STORES = PluginKind(
    kind="lease_store",
    group=LEASE_STORE_ENTRY_POINT_GROUP,
    builtin={},
    info_type=LeaseStoreInfo,
    info_of=lambda value: value if isinstance(value, LeaseStoreInfo) else None,
    expected="not a LeaseStoreInfo",
    unknown="no lease store is named {name!r}; installed: {installed}",
    not_installed=LeaseStoreNotInstalled,
    unknown_error=UnknownLeaseStore,
)


def _incompatibility(info: LeaseStoreInfo) -> str | None:
    if api_compatible(info.api_version):
        return None
    return (
        f"lease store {info.name!r} was written for API {info.api_version!r}; this "
        f"pando-runtime speaks {API_VERSION}"
    )


def register_lease_store(name: str, target: str, *, clobber: bool = False) -> None:
    """Make a lease store loadable by ``name``; ``target`` names a :class:`LeaseStoreInfo`.

    Nothing is imported now. Registering a taken name raises ``ValueError`` unless
    ``clobber`` is true.
    """
    LEASE_STORES.register(name, target, clobber=clobber)


def available_lease_stores() -> list[LeaseStoreInfo]:
    """Every lease store that can be named, sorted by name (``problem`` set if it cannot load)."""
    listed = []
    for info in LEASE_STORES.available():
        why = None if info.problem else _incompatibility(info)
        listed.append(attrs.evolve(info, problem=why) if why else info)
    return listed


def load_lease_store(
    name: str, settings: Mapping[str, Any] | Any | None = None
) -> LeaseStoreClient:
    """Construct the lease store called ``name`` with ``settings``; nothing is called yet.

    Raises:
        UnknownLeaseStore: no store has that name; the message lists those installed.
        LeaseStoreNotInstalled: its code or a dependency is missing, or it was written for an
            API this core does not speak.
        InvalidConfig: ``settings`` have unknown keys, wrong types or numbers out of range;
            each is named (a secret's value never is).
    """
    info, structured = _structured(name, settings)
    return _made(name, info, structured)


def _structured(name: str, settings: Mapping[str, Any] | Any | None) -> tuple[LeaseStoreInfo, Any]:
    """The store's info and its settings structured (its factory not imported yet)."""
    info = LEASE_STORES.find(name)
    if why := _incompatibility(info):
        raise LeaseStoreNotInstalled(
            why,
            remedy="Install a version of the store's distribution for this pando-runtime.",
            details={"lease_store": name, "api_version": info.api_version},
        )
    structured = structure_config(info.config_class, settings, what=f"{name} lease store settings")
    return info, structured


def _made(name: str, info: LeaseStoreInfo, structured: Any) -> LeaseStoreClient:
    store = LEASE_STORES.import_factory(name, info)(structured)
    if not isinstance(store, LeaseStoreClient):
        msg = f"{info.factory!r} did not return a lease store (list, write, delete, aclose)"
        raise LeaseStoreNotInstalled(msg, details={"lease_store": name})
    return store


@attrs.frozen(kw_only=True)
class LeaseStoreSetting:
    """A lease store named in an adapter's settings: its kind and the store's own settings.

    An adapter whose runtime has no lease API of its own (Docker, a fleet) takes one as its
    ``lease_store`` setting and offers ``membership`` over it (:class:`StoreMembership`).
    ``settings`` are masked in ``repr``: they may hold a password.
    """

    kind: str = setting(help="The lease store, by its registered name ('postgres', 'etcd'...).")
    settings: dict[str, Any] = setting(
        factory=dict,
        secret=True,
        help="The store's own settings, as load_lease_store takes them.",
    )


def lease_store_problems(named: LeaseStoreSetting, where: str = "lease_store") -> list[Problem]:
    """What is wrong with a store named in settings, each problem at its path under ``where``.

    No I/O, and no store code imported beyond its light :class:`LeaseStoreInfo`. A setting's
    value is never quoted (the store's checks name a secret's path, never its value).
    """
    try:
        _structured(named.kind, named.settings)
    except (UnknownLeaseStore, LeaseStoreNotInstalled) as error:
        return [Problem(f"{where}.kind", error.message, "unknown")]
    except InvalidConfig as error:
        base = f"{where}.settings"
        return [
            attrs.evolve(p, path=f"{base}.{p.path}" if p.path else base) for p in error.problems
        ]
    return []
