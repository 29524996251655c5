"""Finding and loading adapters by name: the adapter kind of plugin.

Adapters come from three places, later ones winning: the built-in fake, the
entry-point group ``pando_runtime.adapters``, and :func:`register_adapter`.
Every target is a ``"module:attr"`` string resolved on use, so importing this
library or listing adapters imports no adapter's client library. The mechanism is
every plugin kind's (:class:`PluginKind`, in ``_plugins``); what is the adapters' own is
here: a target may name the adapter class itself, an adapter built for another major of the
adapter API is refused, and one built for an older minor is loaded as that minor
(:mod:`._versioned` adapts it). The version is what the plugin declares, in its info or on its
class; one that declares none is taken as the oldest 1.x, with a warning, never as current.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .._contract._errors import AdapterNotInstalled, IncompatibleAdapter, UnknownAdapter
from .._contract._version import API_VERSION, api_compatible, parse_api_version
from .._plugins._kinds import PluginKind
from .._util._log import logger
from ._abc import RuntimeAdapter
from ._info import UNDECLARED_API_VERSION, AdapterInfo, declares_api_version
from ._versioned import versioned

__all__ = ["ENTRY_POINT_GROUP", "available_adapters", "load_adapter", "register_adapter"]

ENTRY_POINT_GROUP = "pando_runtime.adapters"


def _adapter_info(value: Any) -> AdapterInfo | None:
    """The info a target names: an :class:`AdapterInfo`, or one built from an adapter class."""
    if isinstance(value, AdapterInfo):
        return value
    if isinstance(value, type) and issubclass(value, RuntimeAdapter):
        return value.adapter_info()
    return None


ADAPTERS = PluginKind(
    kind="adapter",
    group=ENTRY_POINT_GROUP,
    builtin={"fake": "pando_runtime._adapter._fake_info:FAKE"},
    info_type=AdapterInfo,
    info_of=_adapter_info,
    expected="neither an AdapterInfo nor a RuntimeAdapter subclass",
    unknown="no adapter is named {name!r}; installed adapters: {installed}",
    not_installed=AdapterNotInstalled,
    unknown_error=UnknownAdapter,
)
_registered = ADAPTERS.registered

_LOG = logger("registry")
_warned: set[tuple[str, str]] = set()
"""(adapter, factory) pairs already warned about, so a host listing often logs once."""


def _warn_once(info: AdapterInfo, message: str, *args: object) -> None:
    if (info.name, info.factory) not in _warned:
        _warned.add((info.name, info.factory))
        _LOG.warning(message, *args, extra={"adapter": info.name})


def _listed_version(info: AdapterInfo) -> AdapterInfo:
    """``info`` with a warning when its plugin declares no version (it stays 1.0)."""
    if not declares_api_version(info.api_version):
        _warn_once(
            info,
            "adapter %r (%s) declares no adapter API version: taken as written for %s; its "
            "plugin should set api_version in its AdapterInfo and on its adapter class",
            info.name,
            info.factory,
            UNDECLARED_API_VERSION,
        )
    return info


def _loaded_version(info: AdapterInfo, factory: type[RuntimeAdapter]) -> AdapterInfo:
    """``info`` with the version the plugin declares in its info or on its class.

    Where both declare and differ, the older one is taken (its wrapper adapts more) and the
    disagreement is logged.
    """
    own = factory.adapter_info().api_version
    declared = [v for v in (info.api_version, own) if declares_api_version(v)]
    if not declared:
        return _listed_version(info)
    oldest = min(declared, key=_version_key)
    if len(set(declared)) > 1:
        _warn_once(
            info,
            "adapter %r declares adapter API %s in its info and %s on its class; taken as %s",
            info.name,
            info.api_version,
            own,
            oldest,
        )
    return attrs.evolve(info, api_version=oldest)


def _version_key(version: str) -> tuple[int, int]:
    try:
        return parse_api_version(version)
    except ValueError:  # not a version at all: refused by the compatibility check
        return (-1, -1)


def register_adapter(name: str, target: str, *, clobber: bool = False) -> None:
    """Make an adapter loadable by ``name``; ``target`` is ``"module:attr"``.

    ``attr`` is an :class:`AdapterInfo` or a :class:`RuntimeAdapter` subclass.
    Nothing is imported now. Registering a taken name raises ``ValueError``
    unless ``clobber`` is true.
    """
    ADAPTERS.register(name, target, clobber=clobber)


def available_adapters() -> list[AdapterInfo]:
    """Every adapter that can be named, sorted by name.

    An adapter that is listed but cannot load (a broken install, another API
    version) is included with ``problem`` saying why.
    """
    return [_listed(info) for info in ADAPTERS.available()]


def _listed(info: AdapterInfo) -> AdapterInfo:
    """``info`` as listed: a problem where it cannot load, a warning where it says no version."""
    if info.problem is not None:
        return info
    if not api_compatible(info.api_version):
        return attrs.evolve(
            info,
            problem=f"built for adapter API {info.api_version}, this library speaks {API_VERSION}",
        )
    return _listed_version(info)


def load_adapter(name: str, config: Mapping[str, Any] | Any | None = None) -> RuntimeAdapter:
    """Construct the adapter called ``name`` with ``config``.

    Raises:
        UnknownAdapter: no adapter has that name; the message lists those installed.
        AdapterNotInstalled: its code or a dependency is missing; the remedy says what
            to install.
        IncompatibleAdapter: it was built for another adapter API version.
        InvalidConfig: ``config`` has unknown keys or wrong types.

    An adapter written for an older minor of the API comes back inside the core's
    version-aware wrapper; ``adapter.info.api_version`` is the version its plugin declared
    (``"1.0"`` when it declares none; a warning is logged).
    """
    info = ADAPTERS.find(name)
    _refuse_incompatible(info)
    factory = ADAPTERS.import_factory(name, info)
    if not (isinstance(factory, type) and issubclass(factory, RuntimeAdapter)):
        msg = f"{info.factory!r} is not a RuntimeAdapter subclass"
        raise AdapterNotInstalled(msg, details={"adapter": name})
    info = _loaded_version(info, factory)
    _refuse_incompatible(info)
    return versioned(factory(config), info)


def _refuse_incompatible(info: AdapterInfo) -> None:
    if not api_compatible(info.api_version):
        raise IncompatibleAdapter(
            f"adapter {info.name!r} was built for adapter API {info.api_version}; "
            f"this library speaks {API_VERSION}",
            details={"adapter": info.name, "api_version": info.api_version},
        )
