"""Versions: of the distribution, and of the adapter API it speaks."""

from __future__ import annotations

__all__ = ["API_VERSION", "__version__", "api_compatible"]

__version__ = "0.1.0"

API_VERSION = "1.6"
"""The adapter contract's version: ``MAJOR.MINOR``.

A minor bump only adds (optional request fields, methods with defaults), so an
adapter built for ``1.x`` with ``x`` at most ours loads; another major does not.
"""


def _parse(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


def api_compatible(adapter_api_version: str, host_api_version: str = API_VERSION) -> bool:
    """Whether an adapter written for ``adapter_api_version`` works with this library."""
    try:
        adapter, host = _parse(adapter_api_version), _parse(host_api_version)
    except ValueError:
        return False
    return adapter[0] == host[0] and adapter[1] <= host[1]
