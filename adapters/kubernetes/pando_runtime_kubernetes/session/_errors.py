"""How a cluster session turns an API error into the contract's error, naming its cluster.

A read that fails is :class:`AdapterUnavailable` (never mistaken for an absent object); a
write that fails is :class:`AdapterFailed`; a throttled call past ``rate_limit_wait`` is
:class:`RateLimited` with the server's delay; a conditional write whose precondition no
longer holds is :class:`WriteConflict`, which the feature that made it decides about. When
the API server answered with a reason (a refused verb, a missing namespace), the message
says it and the remedy fits it (``_refusals.py``), whichever feature made the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from pando_runtime import (
    AdapterFailed,
    AdapterUnavailable,
    NotOwner,
    PandoRuntimeError,
    RateLimited,
)

from .._info import KubernetesConfig
from ..api._errors import ApiError
from ._fence_token import stamp_owner
from ._refusals import explain

__all__ = ["ClusterErrors", "WriteConflict", "is_conflict", "named_namespaces"]


class WriteConflict(PandoRuntimeError):
    """A conditional write was refused: the object changed since the version it was made on.

    ``details["version"]`` is the version the write expected (``None``: the create of an
    object that exists). The caller reads again and decides; the session never retries it.
    """

    code = "WRITE_CONFLICT"
    default_remedy = "Read the object again and decide from what it holds now."


def is_conflict(error: BaseException) -> bool:
    """The API refused a write because the object exists or changed (409)."""
    return isinstance(error, ApiError) and error.status == HTTPStatus.CONFLICT


def named_namespaces(config: KubernetesConfig) -> dict[str, str]:
    """The namespaces the settings name, each with its setting (the host's, the edge's)."""
    return {config.server_namespace: "server_namespace", config.edge_namespace: "edge_namespace"}


class ClusterErrors:
    """The contract's errors of one cluster (``name``: ``None`` for an adapter's only one).

    ``namespaces``: the namespaces the adapter's settings name, each with its setting's name
    (``{"pando": "server_namespace"}``): a missing one is reported with the setting.
    """

    def __init__(self, name: str | None, namespaces: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.namespaces = dict(namespaces or {})

    def where(self) -> str:
        """The prefix of a message: the cluster's name, when it has one."""
        return f"cluster {self.name}: " if self.name else ""

    def details(self, status: int | None = None, **more: Any) -> dict[str, Any]:
        """``more``, the HTTP ``status`` when given, and the cluster's name when it has one."""
        details = dict(more)
        if status is not None:
            details["status"] = status
        if self.name:
            details["cluster"] = self.name
        return details

    def down(
        self,
        message: str,
        *,
        remedy: str | None = None,
        status: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> AdapterUnavailable:
        """:class:`AdapterUnavailable` with ``message``, naming this cluster when it has a name."""
        return AdapterUnavailable(
            f"{self.where()}{message}",
            remedy=remedy,
            details=self.details(status, **(details or {})),
        )

    def unavailable(self, error: ApiError, what: str) -> AdapterUnavailable | RateLimited:
        """A read failed: the cluster cannot be read (or throttled it: :class:`RateLimited`)."""
        if error.status == HTTPStatus.TOO_MANY_REQUESTS:
            return self.throttled(error, what)
        refusal = explain(error, self.namespaces)
        if refusal is not None:
            return self.down(
                f"cannot {what}: {refusal.reason}",
                remedy=refusal.remedy,
                status=error.status,
                details=refusal.details,
            )
        return self.down(f"cannot {what}: {error.message}", status=error.status)

    def throttled(self, error: ApiError, what: str) -> RateLimited:
        """The API server throttled ``what`` past the wait allowed."""
        return RateLimited(
            f"{self.where()}the API server throttled {what}: {error.message}",
            retry_after=error.retry_after,
            details=self.details(error.status),
        )

    def failed(self, error: ApiError, what: str) -> AdapterFailed | RateLimited:
        """A write failed (or was throttled: :class:`RateLimited` with the server's delay)."""
        if error.status == HTTPStatus.TOO_MANY_REQUESTS:
            return self.throttled(error, what)
        refusal = explain(error, self.namespaces)
        if refusal is not None:
            return AdapterFailed(
                f"{self.where()}cannot {what}: {refusal.reason}",
                remedy=refusal.remedy,
                details=self.details(error.status, **refusal.details),
            )
        return AdapterFailed(
            f"{self.where()}cannot {what}: {error.message}", details=self.details(error.status)
        )

    def conflict(self, error: ApiError, what: str, version: str | None) -> WriteConflict:
        """A conditional write of ``what`` found the object changed since ``version``."""
        return WriteConflict(
            f"{self.where()}cannot {what}: it changed since version {version}",
            details=self.details(error.status, version=version),
        )

    def fenced(self, stamp: str, what: str) -> NotOwner:
        """A member's write refused: the app's namespace is stamped ``stamp``, not its token."""
        owner = stamp_owner(stamp)
        return NotOwner(
            f"{self.where()}cannot {what}: the app was taken over (its namespace is stamped "
            f"{stamp or 'by nobody'}); this replica's write was refused and nothing of it written",
            details=self.details(owner=owner, stamp=stamp or None),
        )
