"""Versions: of the distribution, and of the adapter API it speaks."""

from __future__ import annotations

__all__ = [
    "API_VERSION",
    "OLDEST_API_VERSION",
    "__version__",
    "api_at_least",
    "api_compatible",
    "parse_api_version",
]

__version__ = "1.7.0"
"""The core distribution's version: its ``MAJOR.MINOR`` is the adapter API it speaks, so a
plugin needing what API 1.5 added requires ``pando-runtime>=1.5,<2``."""

API_VERSION = "1.7"
"""The adapter contract's version: ``MAJOR.MINOR``.

A minor only adds (optional request fields, methods with defaults, capabilities), so an
adapter written for ``1.x`` with ``x`` at most ours loads, and the core adapts to what an
older one cannot say; another major does not load.
"""

OLDEST_API_VERSION = "1.0"
"""The version an adapter that declares none is taken to be written for."""


def parse_api_version(version: str) -> tuple[int, int]:
    """``"1.3"`` as ``(1, 3)`` (``"1"`` as ``(1, 0)``); ``ValueError`` for anything else."""
    major, _, minor = version.partition(".")
    minor = minor or "0"
    if not (major.isdigit() and minor.isdigit()):
        msg = f"{version!r} is not an adapter API version (MAJOR.MINOR, such as '1.3')"
        raise ValueError(msg)
    return int(major), int(minor)


def api_compatible(adapter_api_version: str, host_api_version: str = API_VERSION) -> bool:
    """Whether an adapter written for ``adapter_api_version`` works with this library."""
    try:
        adapter, host = parse_api_version(adapter_api_version), parse_api_version(host_api_version)
    except ValueError:
        return False
    return adapter[0] == host[0] and adapter[1] <= host[1]


def api_at_least(version: str, wanted: str) -> bool:
    """Whether API ``version`` has what API ``wanted`` gave (same major, minor at least)."""
    have, want = parse_api_version(version), parse_api_version(wanted)
    return have[0] == want[0] and have[1] >= want[1]
