"""Finding and loading adapters by name.

Adapters come from three places, later ones winning: the built-in fake, the
entry-point group ``pando_runtime.adapters``, and :func:`register_adapter`.
Every target is a ``"module:attr"`` string resolved on use, so importing this
library or listing adapters imports no adapter's client library.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from typing import Any

import attrs

from ._adapter import RuntimeAdapter
from ._errors import AdapterNotInstalled, IncompatibleAdapter, UnknownAdapter
from ._info import AdapterInfo
from ._version import API_VERSION, api_compatible

__all__ = ["ENTRY_POINT_GROUP", "available_adapters", "load_adapter", "register_adapter"]

ENTRY_POINT_GROUP = "pando_runtime.adapters"

_BUILTIN: dict[str, str] = {"fake": "pando_runtime._fake_info:FAKE"}
_registered: dict[str, str] = {}
_lock = threading.Lock()


def register_adapter(name: str, target: str, *, clobber: bool = False) -> None:
    """Make an adapter loadable by ``name``; ``target`` is ``"module:attr"``.

    ``attr`` is an :class:`AdapterInfo` or a :class:`RuntimeAdapter` subclass.
    Nothing is imported now. Registering a taken name raises ``ValueError``
    unless ``clobber`` is true.
    """
    register_target(_registered, "adapter", name, target, clobber=clobber)


def plugin_targets(
    group: str, builtin: Mapping[str, str], registered: Mapping[str, str]
) -> dict[str, str]:
    """Name -> ``"module:attr"`` of one plugin kind: built-ins, entry points, registrations.

    Shared by every plugin kind (adapters, catalog backends), later sources winning.
    """
    # importlib.metadata costs ~20 ms to import: pay it when plugins are looked up.
    from importlib.metadata import entry_points  # noqa: PLC0415

    targets = dict(builtin)
    for entry in entry_points(group=group):
        targets[entry.name] = entry.value
    with _lock:
        targets.update(registered)
    return targets


def register_target(
    registered: dict[str, str], kind: str, name: str, target: str, *, clobber: bool
) -> None:
    """Record ``name`` -> ``target`` in one plugin kind's registrations (see register_adapter)."""
    if ":" not in target:
        msg = f"target {target!r} must be 'module:attr'"
        raise ValueError(msg)
    with _lock:
        if not clobber and name in registered:
            msg = f"{kind} {name!r} is already registered as {registered[name]!r}"
            raise ValueError(msg)
        registered[name] = target


def _targets() -> dict[str, str]:
    return plugin_targets(ENTRY_POINT_GROUP, _BUILTIN, _registered)


def import_attr(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    value: Any = module
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def _info_from(name: str, target: str) -> AdapterInfo:
    try:
        value = import_attr(target)
    except ImportError as error:
        raise AdapterNotInstalled(
            f"adapter {name!r} is registered but {target!r} cannot be imported: {error}",
            details={"adapter": name, "target": target},
        ) from error
    if isinstance(value, AdapterInfo):
        return value if value.name == name else attrs.evolve(value, name=name)
    if isinstance(value, type) and issubclass(value, RuntimeAdapter):
        return attrs.evolve(value.adapter_info(), name=name)
    msg = f"{target!r} is neither an AdapterInfo nor a RuntimeAdapter subclass"
    raise AdapterNotInstalled(msg, details={"adapter": name, "target": target})


def available_adapters() -> list[AdapterInfo]:
    """Every adapter that can be named, sorted by name.

    An adapter that is listed but cannot load (a broken install, another API
    version) is included with ``problem`` saying why.
    """
    infos = []
    for name, target in sorted(_targets().items()):
        try:
            info = _info_from(name, target)
        except AdapterNotInstalled as error:
            infos.append(
                AdapterInfo(name=name, description="", factory=target, problem=error.message)
            )
            continue
        if not api_compatible(info.api_version):
            info = attrs.evolve(
                info,
                problem=f"built for adapter API {info.api_version}, "
                f"this library speaks {API_VERSION}",
            )
        infos.append(info)
    return infos


def load_adapter(name: str, config: Mapping[str, Any] | Any | None = None) -> RuntimeAdapter:
    """Construct the adapter called ``name`` with ``config``.

    Raises:
        UnknownAdapter: no adapter has that name; the message lists those installed.
        AdapterNotInstalled: its code or a dependency is missing; the remedy says what
            to install.
        IncompatibleAdapter: it was built for another adapter API version.
        InvalidConfig: ``config`` has unknown keys or wrong types.
    """
    targets = _targets()
    if name not in targets:
        installed = ", ".join(sorted(targets)) or "none"
        raise UnknownAdapter(
            f"no adapter is named {name!r}; installed adapters: {installed}",
            details={"adapter": name, "installed": sorted(targets)},
        )
    info = _info_from(name, targets[name])
    if not api_compatible(info.api_version):
        raise IncompatibleAdapter(
            f"adapter {name!r} was built for adapter API {info.api_version}; "
            f"this library speaks {API_VERSION}",
            details={"adapter": name, "api_version": info.api_version},
        )
    try:
        factory = import_attr(info.factory)
    except ImportError as error:
        raise AdapterNotInstalled(
            f"adapter {name!r} cannot be imported: {error}",
            remedy=info.hint,
            details={"adapter": name, "missing": getattr(error, "name", None)},
        ) from error
    if not (isinstance(factory, type) and issubclass(factory, RuntimeAdapter)):
        msg = f"{info.factory!r} is not a RuntimeAdapter subclass"
        raise AdapterNotInstalled(msg, details={"adapter": name})
    return factory(config)
