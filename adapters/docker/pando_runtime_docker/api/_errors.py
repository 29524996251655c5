"""The Engine API's errors, and how they become the core's coded errors.

The transport raises :class:`EngineError` for an answer it did not expect (the features
branch on its status: 404, 409, 304) and :class:`~pando_runtime.AdapterUnavailable` when the
daemon cannot be reached at all. :func:`write_failed` turns an :class:`EngineError` into
the contract's error for a write.
"""

from __future__ import annotations

from typing import Any

from pando_runtime import AdapterFailed, AdapterUnavailable, NotFound, PandoRuntimeError

__all__ = ["EngineError", "unreachable", "write_failed"]

_MESSAGE_LIMIT = 300


class EngineError(Exception):
    """The daemon answered a request with an unexpected status."""

    def __init__(self, status: int, route: str, message: str) -> None:
        self.status = status
        self.route = route
        self.message = message[:_MESSAGE_LIMIT]
        super().__init__(f"{route}: {status} {self.message}")

    @property
    def not_found(self) -> bool:
        """The object named does not exist (404)."""
        return self.status == 404  # noqa: PLR2004 - HTTP status

    @property
    def conflict(self) -> bool:
        """The request clashes with the object's state or another object's name (409)."""
        return self.status == 409  # noqa: PLR2004 - HTTP status

    @property
    def details(self) -> dict[str, Any]:
        """JSON-able details for a coded error."""
        return {"status": self.status, "route": self.route, "daemon_says": self.message}


def unreachable(host: str, cause: str) -> AdapterUnavailable:
    """The daemon cannot be reached: a missing socket, a refused connection, a timeout."""
    return AdapterUnavailable(
        f"the Docker daemon at {host} cannot be reached ({cause})",
        remedy="Start Docker Engine, or point the adapter's 'host' setting (or 'context'; "
        "unset: $DOCKER_HOST, $DOCKER_CONTEXT, the current Docker context, then "
        "unix:///var/run/docker.sock) at a running engine.",
        details={"host": host, "cause": cause},
    )


def write_failed(error: EngineError, doing: str, **details: Any) -> PandoRuntimeError:
    """The coded error for a write the daemon refused: ``NotFound`` for 404."""
    merged = {**error.details, **details}
    if error.not_found:
        return NotFound(f"{doing}: the daemon has no such object", details=merged)
    if error.status >= 500:  # noqa: PLR2004 - HTTP status
        return AdapterUnavailable(f"{doing}: the daemon failed ({error.status})", details=merged)
    return AdapterFailed(f"{doing}: the daemon refused it ({error.status})", details=merged)
