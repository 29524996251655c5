"""Human units for the command line's tables: CPU in cores or millicores, sizes in KiB..TiB.

``--output json`` keeps the raw integers; only tables use these.
"""

from __future__ import annotations

__all__ = ["cpu", "size"]

_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def _number(value: float) -> str:
    # One decimal at most, and none when it is zero: 1.5 GiB, 16 GiB.
    return f"{value:.1f}".removesuffix(".0")


def cpu(millis: int) -> str:
    """``250m`` below one core, ``1 core``, ``1.5 cores``, ``4 cores`` from there."""
    if millis < 1000:  # noqa: PLR2004 - a core is 1000 millicores
        return f"{millis}m"
    cores = f"{millis / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{cores} core" if cores == "1" else f"{cores} cores"


def size(count: int) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``128 MiB``, ``16 GiB``."""
    if count < 1024:  # noqa: PLR2004 - the first binary unit
        return f"{count} B"
    value = float(count)
    for unit in _BINARY_UNITS:
        value /= 1024
        if value < 1024 or unit == _BINARY_UNITS[-1]:  # noqa: PLR2004
            return f"{_number(value)} {unit}"
    raise AssertionError  # pragma: no cover - the loop always returns
