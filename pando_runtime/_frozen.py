"""Converters that keep attrs data types immutable all the way down."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TypeVar

__all__ = ["frozen_mapping", "frozen_tuple"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


def frozen_tuple(items: Iterable[T]) -> tuple[T, ...]:
    """Turn any iterable (a list from JSON, say) into a tuple; refuse a bare string."""
    if isinstance(items, str | bytes):
        msg = f"expected a sequence, not a single {type(items).__name__}"
        raise TypeError(msg)
    return tuple(items)


def frozen_mapping(items: Mapping[K, V] | None) -> Mapping[K, V]:
    """A read-only copy of a mapping, so a frozen value cannot change under a host."""
    return MappingProxyType(dict(items or {}))
