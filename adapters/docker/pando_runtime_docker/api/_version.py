"""Which Engine API version to speak with a daemon: negotiated, never pinned.

The daemon says the highest version it speaks in the ``API-Version`` header of
``GET /_ping``; the adapter speaks the lower of that and :data:`NEWEST_API`, and refuses a
daemon below :data:`OLDEST_API` (Docker 20.10, Debian's package) with a coded error.
"""

from __future__ import annotations

from pando_runtime import AdapterUnavailable

__all__ = ["NEWEST_API", "OLDEST_API", "negotiate_version", "parse_version"]

OLDEST_API = (1, 41)
"""Docker Engine 20.10: the oldest daemon the adapter supports."""
NEWEST_API = (1, 51)
"""The newest API a test has run (Docker Engine 28.3 to 28.5); newer daemons still answer it
(Docker 29.0 to 29.2 accept clients from 1.44 on, 29.3 and later from 1.40). What changes at
1.52 and later is in ``docs/docker.md`` (API versions and daemons)."""


def _text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: str) -> tuple[int, int]:
    """``"1.41"`` as ``(1, 41)``; ``ValueError`` for anything else."""
    major, _, minor = text.strip().partition(".")
    if not major.isdigit() or not minor.isdigit():
        msg = f"not an API version: {text!r}"
        raise ValueError(msg)
    return int(major), int(minor)


def negotiate_version(daemon: str | None, *, host: str = "") -> str:
    """The version to speak with a daemon whose ``_ping`` said ``daemon``.

    A daemon that names no version is spoken to at :data:`OLDEST_API` (the request fails
    clearly if it is older). Raises :class:`AdapterUnavailable` for a daemon older than
    :data:`OLDEST_API` or an unreadable version.
    """
    if not daemon:
        return _text(OLDEST_API)
    try:
        theirs = parse_version(daemon)
    except ValueError:
        raise AdapterUnavailable(
            f"the Docker daemon at {host} names an API version that cannot be read",
            remedy="Point the adapter's 'host' setting at a Docker Engine (20.10 or newer).",
            details={"host": host, "daemon_api": daemon[:40]},
        ) from None
    if theirs < OLDEST_API:
        raise AdapterUnavailable(
            f"the Docker daemon at {host} speaks Engine API {daemon}; the adapter needs "
            f"{_text(OLDEST_API)} (Docker Engine 20.10) or newer",
            remedy="Upgrade Docker Engine to 20.10 or newer, or point the 'host' setting at "
            "a newer daemon.",
            details={"host": host, "daemon_api": daemon, "oldest_api": _text(OLDEST_API)},
        )
    return _text(min(theirs, NEWEST_API))
