"""Converters that keep attrs data types immutable all the way down."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["frozen_mapping", "frozen_tuple"]

# Typed with Any, not a TypeVar: attrs' mypy plugin takes a field's __init__
# type from its converter and cannot solve a generic one.


def frozen_tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    """Turn any iterable (a list from JSON, say) into a tuple; refuse a bare string."""
    if isinstance(items, str | bytes):
        msg = f"expected a sequence, not a single {type(items).__name__}"
        raise TypeError(msg)
    return tuple(items)


def frozen_mapping(items: Mapping[Any, Any] | None) -> Mapping[Any, Any]:
    """A read-only copy of a mapping, so a frozen value cannot change under a host."""
    return MappingProxyType(dict(items or {}))
