"""A session's reads straight from the API server, failing only with the contract's errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, TypeVar

from pando_runtime import AdapterUnavailable

from ..api._errors import ApiError
from ..api._transport import KubeTransport
from ._connection import ClusterConnection
from ._errors import ClusterErrors

__all__ = ["ApiReads"]

T = TypeVar("T")


class ApiReads:
    """GETs of one cluster: an API error is :class:`AdapterUnavailable` (never an absence)."""

    def __init__(self, connection: ClusterConnection, errors: ClusterErrors) -> None:
        self._connection = connection
        self._errors = errors

    async def read(self, what: str, call: Callable[[KubeTransport], Awaitable[T]]) -> T:
        """Run a read; an API error is :class:`AdapterUnavailable` saying ``what`` failed."""
        api = await self._connection.transport()
        try:
            return await call(api)
        except ApiError as error:
            raise self._errors.unavailable(error, what) from error

    async def get(self, path: str, what: str, **query: Any) -> dict[str, Any]:
        """GET ``path``; any error is :class:`AdapterUnavailable`."""
        return await self.read(what, lambda api: api.get(path, **query))

    async def find(
        self, path: str, what: str, *, forbidden_is_absent: bool = False, **query: Any
    ) -> dict[str, Any] | None:
        """GET ``path``; ``None`` when it does not exist, other errors unavailable.

        ``forbidden_is_absent``: a refused read (403, as just after a namespace's RoleBinding
        is written) counts as absent too; the caller's create then settles it.
        """
        api = await self._connection.transport()
        try:
            return await api.get(path, **query)
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND or (
                forbidden_is_absent and error.status == HTTPStatus.FORBIDDEN
            ):
                return None
            raise self._errors.unavailable(error, what) from error

    async def status_of(self, path: str) -> int:
        """The status a GET of ``path`` gets (0: nothing answered, or no cluster to ask).

        For probing what a cluster serves (an API group, say), where the status is the answer.
        """
        try:
            api = await self._connection.transport()
            await api.get(path)
        except ApiError as error:
            return error.status
        except AdapterUnavailable:
            return 0
        return int(HTTPStatus.OK)
