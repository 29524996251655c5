"""Finding and loading adapters by name: the adapter kind of plugin.

Adapters come from three places, later ones winning: the built-in fake, the
entry-point group ``pando_runtime.adapters``, and :func:`register_adapter`.
Every target is a ``"module:attr"`` string resolved on use, so importing this
library or listing adapters imports no adapter's client library. The mechanism is
every plugin kind's (:class:`PluginKind`, in ``_plugins``); what is the adapters' own is
here: a target may name the adapter class itself, and an adapter built for another
adapter API version is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .._contract._errors import AdapterNotInstalled, IncompatibleAdapter, UnknownAdapter
from .._contract._version import API_VERSION, api_compatible
from .._plugins._kinds import PluginKind
from ._abc import RuntimeAdapter
from ._info import AdapterInfo

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
    infos = ADAPTERS.available()
    return [
        info
        if info.problem is not None or api_compatible(info.api_version)
        else attrs.evolve(
            info,
            problem=f"built for adapter API {info.api_version}, this library speaks {API_VERSION}",
        )
        for info in infos
    ]


def load_adapter(name: str, config: Mapping[str, Any] | Any | None = None) -> RuntimeAdapter:
    """Construct the adapter called ``name`` with ``config``.

    Raises:
        UnknownAdapter: no adapter has that name; the message lists those installed.
        AdapterNotInstalled: its code or a dependency is missing; the remedy says what
            to install.
        IncompatibleAdapter: it was built for another adapter API version.
        InvalidConfig: ``config`` has unknown keys or wrong types.
    """
    info = ADAPTERS.find(name)
    if not api_compatible(info.api_version):
        raise IncompatibleAdapter(
            f"adapter {name!r} was built for adapter API {info.api_version}; "
            f"this library speaks {API_VERSION}",
            details={"adapter": name, "api_version": info.api_version},
        )
    factory = ADAPTERS.import_factory(name, info)
    if not (isinstance(factory, type) and issubclass(factory, RuntimeAdapter)):
        msg = f"{info.factory!r} is not a RuntimeAdapter subclass"
        raise AdapterNotInstalled(msg, details={"adapter": name})
    return factory(config)
