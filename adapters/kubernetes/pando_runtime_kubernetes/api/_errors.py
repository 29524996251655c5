"""The API error every call in the ``api`` layer raises; at the bottom, so nothing imports back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ApiError"]


class ApiError(Exception):
    """An API call failed: ``status`` is the HTTP status, 0 when nothing answered."""

    def __init__(
        self,
        status: int,
        reason: str,
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body: dict[str, Any] = dict(body or {})
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        """The API server's message, or the reason."""
        return str(self.body.get("message") or self.reason)
