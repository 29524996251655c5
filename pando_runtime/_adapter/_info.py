"""What an adapter says about itself before anything heavy is imported."""

from __future__ import annotations

from typing import Any

import attrs

from .._contract._version import OLDEST_API_VERSION
from .._input._config import ConfigField, EmptyConfig, config_fields, config_json_schema
from .._plugins._kinds import install_hint

__all__ = ["UNDECLARED_API_VERSION", "AdapterInfo", "declares_api_version"]


class _Undeclared(str):
    """The API version of an adapter that declares none: the oldest 1.x, told apart by identity."""

    __slots__ = ()


UNDECLARED_API_VERSION: str = _Undeclared(OLDEST_API_VERSION)
"""``AdapterInfo.api_version`` when a plugin says nothing: equal to ``"1.0"``, never current."""


def declares_api_version(version: str) -> bool:
    """Whether ``version`` was declared by the adapter, not defaulted for it."""
    return version is not UNDECLARED_API_VERSION


@attrs.frozen(kw_only=True)
class AdapterInfo:
    """An adapter's name, description, API version, settings and where its code lives.

    A plugin points its ``pando_runtime.adapters`` entry point at an
    ``AdapterInfo`` kept in a light module (attrs only), so that listing
    adapters never imports the runtime's client library. ``factory`` is the
    ``"module:attr"`` of the adapter class, imported by ``load_adapter``.

    ``api_version`` is the adapter API version the plugin was written for (``"1.3"``); the
    core adapts to what an adapter written for an older minor cannot say. A plugin that
    declares none (here or as its class's ``api_version``) is taken as written for ``"1.0"``,
    with a warning logged when it is listed or loaded.
    """

    name: str
    description: str
    factory: str
    config_class: type[Any] = attrs.field(default=EmptyConfig, eq=False)
    api_version: str = UNDECLARED_API_VERSION
    distribution: str | None = None
    install_hint: str | None = None
    problem: str | None = None
    """Set by ``available_adapters`` when the adapter is listed but cannot load."""

    @property
    def config_fields(self) -> tuple[ConfigField, ...]:
        """The adapter's settings (key, type, help, default, required, secret)."""
        return config_fields(self.config_class)

    def config_schema(self) -> dict[str, Any]:
        """A JSON Schema of the adapter's settings, for host UIs."""
        return config_json_schema(self.config_class, title=f"{self.name} adapter settings")

    @property
    def hint(self) -> str:
        """What to run to install this adapter's code."""
        return install_hint(self.distribution, "adapter", self.install_hint)
