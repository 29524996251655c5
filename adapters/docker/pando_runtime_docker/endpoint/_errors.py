"""The errors of reaching an engine: each failure its own ``reason``, message and remedy.

All are :class:`~pando_runtime.AdapterUnavailable` (the engine cannot be read), with
``details["reason"]`` naming what failed (``unknown_ca``, ``host_key_changed``...; the list
is in ``docs/docker.md``) and ``details["host"]`` the engine's address. None carries key
material: only names, fingerprints, dates and the server's own words.
"""

from __future__ import annotations

from typing import Any

from pando_runtime import AdapterUnavailable

__all__ = ["refused"]


def refused(
    host: str, reason: str, message: str, remedy: str, **details: Any
) -> AdapterUnavailable:
    """The engine at ``host`` could not be reached for ``reason`` (a stable word)."""
    return AdapterUnavailable(
        f"the Docker engine at {host}: {message}",
        remedy=remedy,
        details={"host": host, "reason": reason, **details},
    )
