"""Adapter configuration: attrs ``Config`` classes, strict structuring, JSON Schema.

An adapter declares its settings as an attrs class whose fields are made with
:func:`setting`; hosts pass a plain mapping (from a file, a form, the
environment) and get either a typed config or :class:`InvalidConfig` naming
every bad key and the valid ones.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from ._errors import InvalidConfig

__all__ = [
    "ConfigField",
    "EmptyConfig",
    "config_fields",
    "config_json_schema",
    "setting",
    "structure_config",
]

C = TypeVar("C")

_HELP = "pando_runtime.help"
_MASKED = "pando_runtime.secret"


def setting(
    *,
    default: Any = attrs.NOTHING,
    factory: Any = None,
    help: str = "",  # noqa: A002 - the natural name for a setting's description
    secret: bool = False,
) -> Any:
    """Declare one setting of an adapter's ``Config`` class.

    ``secret`` settings are masked in ``repr`` and marked for host UIs.
    """
    metadata = {_HELP: help, _MASKED: secret}
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata, repr=not secret)
    return attrs.field(default=default, metadata=metadata, repr=not secret)


@attrs.frozen
class EmptyConfig:
    """The config of an adapter that has no settings."""


@attrs.frozen(kw_only=True)
class ConfigField:
    """One setting as a host UI shows it."""

    key: str
    type: str
    help: str = ""
    default: Any = None
    required: bool = False
    secret: bool = False


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        schemas = [_json_type(a) for a in args]
        nullable = len(args) < len(typing.get_args(annotation))
        schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        if nullable:
            return {"anyOf": [schema, {"type": "null"}]}
        return schema
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in simple:
        return {"type": simple[annotation]}
    if origin in (list, tuple, set, frozenset, typing.Sequence):
        return {"type": "array", "items": _json_type(args[0]) if args else {}}
    if origin in (dict, Mapping, typing.Mapping):
        return {
            "type": "object",
            "additionalProperties": _json_type(args[1]) if len(args) > 1 else {},
        }
    return {}


def _type_name(schema: Mapping[str, Any]) -> str:
    if "type" in schema:
        return str(schema["type"])
    for option in schema.get("anyOf", ()):
        if option.get("type") != "null":
            return _type_name(option)
    return "any"


def config_fields(config_class: type[Any]) -> tuple[ConfigField, ...]:
    """The settings of an attrs ``Config`` class, for listing and forms."""
    from ._convert import unstructure  # noqa: PLC0415 - cattrs is imported on first conversion

    hints = typing.get_type_hints(config_class)
    fields = []
    for field in attrs.fields(config_class):
        required = field.default is attrs.NOTHING
        default: Any = None
        factory = getattr(field.default, "factory", None)  # an attrs.Factory default
        if callable(factory):
            default = unstructure(factory())
        elif not required:
            default = unstructure(field.default)
        fields.append(
            ConfigField(
                key=field.name,
                type=_type_name(_json_type(hints[field.name])),
                help=field.metadata.get(_HELP, ""),
                default=None if field.metadata.get(_MASKED) else default,
                required=required,
                secret=bool(field.metadata.get(_MASKED, False)),
            )
        )
    return tuple(fields)


def config_json_schema(config_class: type[Any], *, title: str | None = None) -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of an adapter's settings, for host UIs."""
    hints = typing.get_type_hints(config_class)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field, described in zip(
        attrs.fields(config_class), config_fields(config_class), strict=True
    ):
        schema = dict(_json_type(hints[field.name]))
        if described.help:
            schema["description"] = described.help
        if described.required:
            required.append(field.name)
        elif not described.secret:
            schema["default"] = described.default
        if described.secret:
            schema["writeOnly"] = True
        properties[field.name] = schema
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title or config_class.__name__,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def structure_config(config_class: type[C], config: Mapping[str, Any] | C | None) -> C:
    """``config`` as an instance of ``config_class``; :class:`InvalidConfig` lists every fault."""
    if isinstance(config, config_class):
        return config
    from ._convert import structure  # noqa: PLC0415 - cattrs is imported on first conversion

    return structure(
        config if config is not None else {},
        config_class,
        error=InvalidConfig,
        what="adapter config",
    )
