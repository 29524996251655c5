"""One mechanism for every kind of plugin: found by name, listed, loaded, refused alike.

A kind of plugin (adapters, catalog backends) is a :class:`PluginKind`: its entry-point group,
its built-ins and its run-time registrations give each name a ``"module:attr"`` target, later
sources winning; the target names a light *info* object (name, description, settings, where
the code lives, how to install it) that is resolved on use, so importing this library or
listing plugins imports no plugin's client library. What a kind checks beyond that (the
adapter API version, a catalog's settings) stays with the kind (``_adapter._registry``,
``catalog._registry``); the errors are the kind's own classes with the same messages.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar, cast

import attrs

from .._contract._errors import PandoRuntimeError

__all__ = ["PluginInfo", "PluginKind", "import_attr", "install_hint", "plugin_targets"]

_lock = threading.Lock()


class PluginInfo(Protocol):
    """What every kind's info has: its name, its factory's target, a problem, a hint."""

    @property
    def name(self) -> str:
        """The name it is loaded by."""
        ...

    @property
    def factory(self) -> str:
        """``"module:attr"`` of what makes the plugin."""
        ...

    @property
    def hint(self) -> str:
        """What to run to install the plugin's code."""
        ...


InfoT = TypeVar("InfoT", bound=PluginInfo)


def install_hint(distribution: str | None, noun: str, explicit: str | None = None) -> str:
    """What to run to install a plugin: ``explicit``, else ``pip install <distribution>``."""
    if explicit:
        return explicit
    if distribution:
        return f"pip install {distribution}"
    return f"install the distribution that provides this {noun}"


def import_attr(target: str) -> Any:
    """The object a ``"module:attr"`` target names (``attr`` may be dotted)."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    value: Any = module
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def plugin_targets(
    group: str, builtin: Mapping[str, str], registered: Mapping[str, str]
) -> dict[str, str]:
    """Name -> ``"module:attr"`` of one plugin kind: built-ins, entry points, registrations.

    Later sources win.
    """
    # importlib.metadata costs ~20 ms to import: pay it when plugins are looked up.
    from importlib.metadata import entry_points  # noqa: PLC0415

    targets = dict(builtin)
    for entry in entry_points(group=group):
        targets[entry.name] = entry.value
    with _lock:
        targets.update(registered)
    return targets


class PluginKind(Generic[InfoT]):
    """One kind of plugin: where its names come from, what their targets must be, its errors.

    Args:
        kind: the word its errors and details use (``"adapter"``, ``"catalog"``).
        group: its entry-point group.
        builtin: name -> target of the plugins the library ships.
        info_type: its info class, made with ``name``, ``description``, ``factory`` and
            ``problem`` for a plugin listed but broken.
        info_of: the info a target's object gives (``None``: not one of this kind's).
        expected: what a target must name, after "is" (``"not a CatalogInfo"``).
        unknown: the message for an unknown name, with ``{name!r}`` and ``{installed}``.
        not_installed: the error for a plugin whose code cannot be imported.
        unknown_error: the error for a name no plugin has.
    """

    def __init__(
        self,
        *,
        kind: str,
        group: str,
        builtin: Mapping[str, str],
        info_type: Callable[..., InfoT],
        info_of: Callable[[Any], InfoT | None],
        expected: str,
        unknown: str,
        not_installed: type[PandoRuntimeError],
        unknown_error: type[PandoRuntimeError],
    ) -> None:
        self.kind = kind
        self.group = group
        self.builtin = dict(builtin)
        self.registered: dict[str, str] = {}
        """Run-time registrations (:meth:`register`), winning over entry points."""
        self._info_type = info_type
        self._info_of = info_of
        self._expected = expected
        self._unknown = unknown
        self._not_installed = not_installed
        self._unknown_error = unknown_error

    def register(self, name: str, target: str, *, clobber: bool = False) -> None:
        """Make ``name`` loadable from ``target`` (``"module:attr"``); nothing is imported now.

        A taken name raises ``ValueError`` unless ``clobber`` is true.
        """
        if ":" not in target:
            msg = f"target {target!r} must be 'module:attr'"
            raise ValueError(msg)
        with _lock:
            if not clobber and name in self.registered:
                msg = f"{self.kind} {name!r} is already registered as {self.registered[name]!r}"
                raise ValueError(msg)
            self.registered[name] = target

    def targets(self) -> dict[str, str]:
        """Name -> target of every plugin of this kind that can be named."""
        return plugin_targets(self.group, self.builtin, self.registered)

    def info(self, name: str, target: str) -> InfoT:
        """The info ``target`` names, called ``name``; ``not_installed`` when it cannot be.

        Whatever importing the target raises is that plugin's problem alone: a module that
        fails on import, or uses a deprecated name while warnings are errors (``-W error``),
        is reported as not installed, never raised through a listing of every plugin.
        """
        try:
            value = import_attr(target)
        except Exception as error:
            why = str(error)
            if not isinstance(error, ImportError | AttributeError):
                why = f"{type(error).__name__}: {why}"
            raise self._not_installed(
                f"{self.kind} {name!r} is registered but {target!r} cannot be imported: {why}",
                details={self.kind: name, "target": target},
            ) from error
        info = self._info_of(value)
        if info is None:
            msg = f"{target!r} is {self._expected}"
            raise self._not_installed(msg, details={self.kind: name, "target": target})
        if info.name == name:
            return info
        renamed: InfoT = attrs.evolve(cast("Any", info), name=name)  # every info is attrs
        return renamed

    def available(self) -> list[InfoT]:
        """Every plugin that can be named, sorted by name; a broken one with ``problem`` set."""
        infos = []
        for name, target in sorted(self.targets().items()):
            try:
                infos.append(self.info(name, target))
            except self._not_installed as error:
                infos.append(
                    self._info_type(
                        name=name, description="", factory=target, problem=error.message
                    )
                )
        return infos

    def find(self, name: str) -> InfoT:
        """The info of the plugin called ``name``; ``unknown_error`` listing those installed."""
        targets = self.targets()
        if name not in targets:
            installed = ", ".join(sorted(targets)) or "none"
            raise self._unknown_error(
                self._unknown.format(name=name, installed=installed),
                details={self.kind: name, "installed": sorted(targets)},
            )
        return self.info(name, targets[name])

    def import_factory(self, name: str, info: InfoT) -> Any:
        """What ``info.factory`` names; ``not_installed`` with the install hint when missing."""
        try:
            return import_attr(info.factory)
        except ImportError as error:
            raise self._not_installed(
                f"{self.kind} {name!r} cannot be imported: {error}",
                remedy=info.hint,
                details={self.kind: name, "missing": getattr(error, "name", None)},
            ) from error
