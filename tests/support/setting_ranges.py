"""Checks of the ranges an adapter's numeric settings declare (``setting(minimum=...)``).

Shared by the core's tests (the fake), each adapter's and the bad-input corpus
(``bad_input.py``): every numeric setting has a range, a value at each edge is taken, one just
past it is refused with ``out_of_range`` at the setting's path, and so are NaN and the
infinities.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pando_runtime as pr
from pando_runtime._input._config import config_fields

NUMERIC = ("integer", "number")

Bounds = tuple[float | None, float | None, float | None, float | None]
"""minimum, exclusive_minimum, maximum, exclusive_maximum (as ``ConfigField`` has them)."""


def declared_ranges(config_class: type[Any]) -> dict[str, Bounds]:
    """The range of each numeric setting, by key (``(None, None, None, None)``: none)."""
    return {
        f.key: (f.minimum, f.exclusive_minimum, f.maximum, f.exclusive_maximum)
        for f in config_fields(config_class)
        if f.type in NUMERIC
    }


def _step(value: float, integer: bool, direction: float) -> float:
    """The next value past ``value`` towards ``direction`` that the setting's type can hold."""
    if integer:
        return int(value) + (1 if direction > 0 else -1)
    return math.nextafter(value, direction)


def edge_values(field: pr.plugin.ConfigField) -> list[tuple[Any, bool]]:
    """Values at and just past each bound of ``field``, each with whether it is in range."""
    integer = field.type == "integer"
    cases: list[tuple[Any, bool]] = []
    if field.minimum is not None:
        cases += [(field.minimum, True), (_step(field.minimum, integer, -math.inf), False)]
    if field.exclusive_minimum is not None:
        low = field.exclusive_minimum
        cases += [(low, False), (_step(low, integer, math.inf), True)]
    if field.maximum is not None:
        cases += [(field.maximum, True), (_step(field.maximum, integer, math.inf), False)]
    if field.exclusive_maximum is not None:
        high = field.exclusive_maximum
        cases += [(high, False), (_step(high, integer, -math.inf), True)]
    if not integer:
        cases += [(math.nan, False), (math.inf, False), (-math.inf, False)]
    return [(int(v) if integer and math.isfinite(v) else v, ok) for v, ok in cases]


def out_of_range_values(field: pr.plugin.ConfigField) -> list[Any]:
    """Numbers ``field`` refuses: just past each bound, far past it, NaN and the infinities."""
    integer = field.type == "integer"
    far = [] if integer else [math.nan, math.inf, -math.inf]
    low = field.minimum if field.minimum is not None else field.exclusive_minimum
    high = field.maximum if field.maximum is not None else field.exclusive_maximum
    if low is not None:
        far += [low - 10**6, -(2**70) if integer else -1e300]
    if high is not None:
        far += [high + 10**6, 2**70 if integer else 1e300]
    past = [v for v, ok in edge_values(field) if not ok]
    return [int(v) if integer and math.isfinite(v) else v for v in [*past, *far]]


def in_range(field: pr.plugin.ConfigField, value: Any) -> bool:
    """Whether ``value`` is within ``field``'s declared range (``None`` always is)."""
    if value is None:
        return True
    return (
        math.isfinite(value)
        and (field.minimum is None or value >= field.minimum)
        and (field.exclusive_minimum is None or value > field.exclusive_minimum)
        and (field.maximum is None or value <= field.maximum)
        and (field.exclusive_maximum is None or value < field.exclusive_maximum)
    )


def assert_within_ranges(config: object) -> None:
    """Every numeric setting of a config that was taken is within its range."""
    for field in config_fields(type(config)):
        if field.type in NUMERIC:
            value = getattr(config, field.key)
            assert in_range(field, value), f"{field.key}={value!r} was taken"


def assert_out_of_range(error: pr.InvalidInput, path: str, key: str) -> None:
    """``error`` refuses the number at ``path`` as out of range; message and remedy say the range.

    ``key`` is the setting's name, as the remedy names it.
    """
    assert error.code == "INVALID_CONFIG", error
    located = [p for p in error.problems if p.path == path]
    assert [p.code for p in located] == ["out_of_range"], error.problems
    message = located[0].message
    assert message.startswith("must be "), message
    allowed = message.removeprefix("must be ").rsplit(", got ", 1)[0]
    assert allowed, message
    assert f"{key} {allowed}" in error.remedy, error.remedy


def check_edges(
    config_class: type[Any],
    load: Callable[[dict[str, Any]], object],
    *,
    path: Callable[[str], str] = lambda key: key,
    base: dict[str, Any] | None = None,
) -> int:
    """Load each numeric setting at and past its edges: taken in range, refused past it.

    A float setting without a range fails here: it takes NaN.

    ``load`` makes the adapter (or backend) from a settings mapping; ``path`` is where a
    setting's problem is reported; ``base`` holds other settings each load needs. Returns how
    many values were tried.
    """
    tried = 0
    for field in config_fields(config_class):
        if field.type not in NUMERIC:
            continue
        for value, ok in edge_values(field):
            tried += 1
            settings = {**(base or {}), field.key: value}
            if ok:
                load(settings)
                continue
            try:
                load(settings)
            except pr.InvalidConfig as error:
                assert_out_of_range(error, path(field.key), field.key)
            else:
                msg = f"{field.key}={value!r} was taken"
                raise AssertionError(msg)
    return tried
