"""Adapter configuration: attrs ``Config`` classes, strict structuring, JSON Schema.

An adapter declares its settings as an attrs class whose fields are made with
:func:`setting`; hosts pass a plain mapping (from a file, a form, the
environment) and get either a typed config or :class:`InvalidConfig` naming
every bad key and the valid ones. A numeric setting may declare the range it
takes (``minimum=``, ``exclusive_minimum=``, ...); a value outside it, NaN or an
infinity is refused with the range in the message and the remedy.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeGuard, TypeVar

import attrs

from .._contract._errors import InvalidConfig, Problem

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
_RANGE = "pando_runtime.range"


def _number(value: float) -> str:
    """``value`` as a person writes it: ``0``, ``86400``, ``0.05``."""
    if float(value).is_integer() and abs(value) < 1e15:  # noqa: PLR2004 - exact as an int
        return str(int(value))
    return repr(float(value))


@attrs.frozen(kw_only=True)
class _Range:
    """The numbers a setting takes; each bound is optional, inclusive or exclusive."""

    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    exclusive_maximum: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.minimum is not None and self.exclusive_minimum is not None:
            msg = "give minimum or exclusive_minimum, not both"
            raise ValueError(msg)
        if self.maximum is not None and self.exclusive_maximum is not None:
            msg = "give maximum or exclusive_maximum, not both"
            raise ValueError(msg)
        low = self.minimum if self.minimum is not None else self.exclusive_minimum
        high = self.maximum if self.maximum is not None else self.exclusive_maximum
        if low is not None and high is not None and not self.holds(low / 2 + high / 2):
            msg = f"the range {self.describe()} holds no number"
            raise ValueError(msg)

    def holds(self, value: float) -> bool:
        """Whether ``value`` is in the range (never NaN, never an infinity)."""
        if not math.isfinite(value):
            return False
        return not (
            (self.minimum is not None and value < self.minimum)
            or (self.exclusive_minimum is not None and value <= self.exclusive_minimum)
            or (self.maximum is not None and value > self.maximum)
            or (self.exclusive_maximum is not None and value >= self.exclusive_maximum)
        )

    def describe(self) -> str:
        """The range in words: ``greater than 0``, ``from 1 to 65535``."""
        if self.minimum is not None and self.maximum is not None:
            return f"from {_number(self.minimum)} to {_number(self.maximum)}"
        parts = []
        if self.minimum is not None:
            parts.append(f"at least {_number(self.minimum)}")
        if self.exclusive_minimum is not None:
            parts.append(f"greater than {_number(self.exclusive_minimum)}")
        if self.maximum is not None:
            parts.append(f"at most {_number(self.maximum)}")
        if self.exclusive_maximum is not None:
            parts.append(f"less than {_number(self.exclusive_maximum)}")
        return " and ".join(parts) or "a finite number"


def setting(
    *,
    default: Any = attrs.NOTHING,
    factory: Any = None,
    help: str = "",  # noqa: A002 - the natural name for a setting's description
    secret: bool = False,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    maximum: float | None = None,
    exclusive_maximum: float | None = None,
) -> Any:
    """Declare one setting of an adapter's ``Config`` class.

    ``secret`` settings are masked in ``repr`` and marked for host UIs.

    A numeric setting may bound the numbers it takes, as JSON Schema does:
    ``minimum``/``maximum`` are inclusive, ``exclusive_minimum``/``exclusive_maximum``
    are not (``exclusive_minimum=0``: greater than 0). A bounded setting takes finite
    numbers only; ``None`` (for an optional setting) is not bounded. A value out of
    range is refused by :func:`structure_config` (``out_of_range``, naming the range),
    and the bounds are in :class:`ConfigField` and the JSON Schema.

    Raises:
        ValueError: the bounds contradict each other or the default is out of them.
    """
    metadata: dict[str, Any] = {_HELP: help, _MASKED: secret}
    bounds = (minimum, exclusive_minimum, maximum, exclusive_maximum)
    if any(b is not None for b in bounds):
        allowed = _Range(
            minimum=minimum,
            exclusive_minimum=exclusive_minimum,
            maximum=maximum,
            exclusive_maximum=exclusive_maximum,
        )
        if _is_number(default) and not allowed.holds(default):
            msg = f"the default {default!r} is not {allowed.describe()}"
            raise ValueError(msg)
        metadata[_RANGE] = allowed
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata, repr=not secret)
    return attrs.field(default=default, metadata=metadata, repr=not secret)


def _is_number(value: Any) -> TypeGuard[float]:
    # bool is an int subclass; a JSON true is never a number here.
    return isinstance(value, int | float) and not isinstance(value, bool)


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
    minimum: float | None = None
    """The least value allowed (inclusive); ``None``: no such bound."""
    exclusive_minimum: float | None = None
    """Values must be greater than this; ``None``: no such bound."""
    maximum: float | None = None
    """The greatest value allowed (inclusive); ``None``: no such bound."""
    exclusive_maximum: float | None = None
    """Values must be less than this; ``None``: no such bound."""


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
    if annotation in simple or (isinstance(annotation, type) and attrs.has(annotation)):
        return _leaf_type(annotation, simple)
    if origin in (list, tuple, set, frozenset, typing.Sequence):
        return {"type": "array", "items": _json_type(args[0]) if args else {}}
    if origin in (dict, Mapping, typing.Mapping):
        return {
            "type": "object",
            "additionalProperties": _json_type(args[1]) if len(args) > 1 else {},
        }
    return {}


def _leaf_type(annotation: Any, simple: Mapping[Any, str]) -> dict[str, Any]:
    """A plain type's schema, or a nested settings class's (``LeaseStoreSetting``)."""
    if annotation in simple:
        return {"type": simple[annotation]}
    nested = config_json_schema(annotation)
    return {k: v for k, v in nested.items() if k not in ("$schema", "title")}


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
        allowed = field.metadata.get(_RANGE) or _Range()
        fields.append(
            ConfigField(
                key=field.name,
                type=_type_name(_json_type(hints[field.name])),
                help=field.metadata.get(_HELP, ""),
                default=None if field.metadata.get(_MASKED) else default,
                required=required,
                secret=bool(field.metadata.get(_MASKED, False)),
                minimum=allowed.minimum,
                exclusive_minimum=allowed.exclusive_minimum,
                maximum=allowed.maximum,
                exclusive_maximum=allowed.exclusive_maximum,
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
        # JSON Schema's numeric keywords ignore other types: null stays allowed where it was.
        bounds = {
            "minimum": described.minimum,
            "exclusiveMinimum": described.exclusive_minimum,
            "maximum": described.maximum,
            "exclusiveMaximum": described.exclusive_maximum,
        }
        schema.update({k: bound for k, bound in bounds.items() if bound is not None})
        properties[field.name] = schema
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title or config_class.__name__,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _out_of_range(config_class: type[Any], values: Mapping[Any, Any]) -> list[Problem]:
    """A problem for each bounded setting in ``values`` whose number is out of its range.

    Values that are no number are left to structuring (a wrong type is its problem).
    """
    problems = []
    for field in attrs.fields(config_class):
        allowed: _Range | None = field.metadata.get(_RANGE)
        value = values.get(field.name)
        if allowed is None or not _is_number(value) or allowed.holds(value):
            continue
        problems.append(
            Problem(
                field.name,
                f"must be {allowed.describe()}, got {value!r}",
                "out_of_range",
            )
        )
    return problems


def _values(config: Any) -> dict[str, Any]:
    """The settings of a ``Config`` instance by name."""
    return {f.name: getattr(config, f.name) for f in attrs.fields(type(config))}


def _in_field_order(config_class: type[Any], problems: list[Problem]) -> list[Problem]:
    """``problems`` in the order of the settings they are about (others last, as they were)."""
    order = {f.name: i for i, f in enumerate(attrs.fields(config_class))}
    return sorted(
        problems,
        key=lambda p: order.get(re.split(r"[.\[]", p.path, maxsplit=1)[0], len(order)),
    )


def _range_remedy(config_class: type[Any], problems: list[Problem]) -> str:
    ranges = {
        f.name: f.metadata[_RANGE].describe()
        for f in attrs.fields(config_class)
        if _RANGE in f.metadata
    }
    named = "; ".join(f"{p.path} {ranges[p.path]}" for p in problems if p.path in ranges)
    return f"Give each setting a number in its range: {named}."


def structure_config(
    config_class: type[C],
    config: Mapping[str, Any] | C | None,
    *,
    what: str = "adapter config",
) -> C:
    """``config`` as an instance of ``config_class``; :class:`InvalidConfig` lists every fault.

    A mapping is structured strictly (unknown keys, missing or wrong types) and each
    bounded setting is checked against its range, all problems at once; an instance
    of ``config_class`` is checked against the ranges too. ``what`` names the config
    in the error's message.
    """
    if isinstance(config, config_class):
        if ranged := _out_of_range(config_class, _values(config)):
            remedy = _range_remedy(config_class, ranged)
            raise InvalidConfig(f"{what} is not valid", ranged, remedy=remedy)
        return config
    from ._convert import structure  # noqa: PLC0415 - cattrs is imported on first conversion

    data = config if config is not None else {}
    ranged = _out_of_range(config_class, data) if isinstance(data, Mapping) else []
    try:
        structured = structure(data, config_class, error=InvalidConfig, what=what)
    except InvalidConfig as error:
        faulty = {p.path for p in error.problems}
        ranged = [p for p in ranged if p.path not in faulty]
        if not ranged:
            raise
        problems = _in_field_order(config_class, [*error.problems, *ranged])
        remedy = f"{InvalidConfig.default_remedy} {_range_remedy(config_class, ranged)}"
        raise InvalidConfig(f"{what} is not valid", problems, remedy=remedy) from None
    if ranged:
        remedy = _range_remedy(config_class, ranged)
        raise InvalidConfig(f"{what} is not valid", ranged, remedy=remedy)
    return structured
