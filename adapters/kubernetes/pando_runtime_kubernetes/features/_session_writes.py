"""A session's writes: retried where RBAC caches refuse them, conditional where asked, counted.

A write is retried on a 403 just after a namespace's RoleBinding is written (RBAC caches);
one the fence policy refused (deploy/admission.yaml) is :class:`NotOwner` at once. A
conditional write (:meth:`SessionWriter.write_if`) is made on a ``resourceVersion``; a 409 is
:class:`WriteConflict` for the caller to decide. The writes of a block are counted
(:func:`counting_writes`), which an apply reports.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator, Mapping
from http import HTTPStatus
from typing import Any, TypeVar

import anyio

from .._log import logger
from ..api._errors import ApiError
from ..api._transport import KubeTransport
from ._fence_token import refused_stamp
from ._session_errors import ClusterErrors, is_conflict

__all__ = ["SessionWriter", "counting_writes", "wrote"]

T = TypeVar("T")

_LOG = logger("session")

_WRITES: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "pando_kubernetes_writes", default=None
)
"""The write tally of the current :func:`counting_writes` block, if any."""


@contextlib.contextmanager
def counting_writes() -> Iterator[list[int]]:
    """Count the writes made in this block (by this task): ``tally[0]`` at its end."""
    tally = [0]
    token = _WRITES.set(tally)
    try:
        yield tally
    finally:
        _WRITES.reset(token)


def wrote() -> None:
    """One write made (counted in the current :func:`counting_writes` block, if any)."""
    tally = _WRITES.get()
    if tally is not None:
        tally[0] += 1


class SessionWriter:
    """The writes of one cluster, over the session's transport, in the contract's errors."""

    def __init__(
        self,
        transport: Callable[[], Awaitable[KubeTransport]],
        errors: ClusterErrors,
        log_name: Callable[[], str | None],
    ) -> None:
        self._transport = transport
        self._errors = errors
        self._log_name = log_name

    async def write(
        self,
        what: str,
        call: Callable[[KubeTransport], Awaitable[T]],
        *,
        retry_forbidden: bool = True,
    ) -> T:
        """A write; a 403 right after a namespace's RoleBinding is retried (RBAC caches).

        ``retry_forbidden=False``: a 403 is final (a cluster-wide write no RoleBinding grants).
        Refused by the fence policy (a member's write under a stamp that moved on):
        :class:`NotOwner` naming the stamp's replica, never retried.
        """
        api = await self._transport()
        delay = 0.1
        for attempt in range(8):
            try:
                result = await call(api)
            except ApiError as error:
                stamp = refused_stamp(error.message)
                if stamp is not None:
                    raise self._errors.fenced(stamp, what) from error
                retry = retry_forbidden and error.status == HTTPStatus.FORBIDDEN and attempt < 7  # noqa: PLR2004
                if not retry:
                    raise self._errors.failed(error, what) from error
            else:
                wrote()
                return result
            _LOG.warning(
                "%s was refused (403), as just after a RoleBinding is written; retry %d in %.1f s",
                what,
                attempt + 1,
                delay,
                extra={"cluster": self._log_name(), "status": 403, "attempt": attempt + 1},
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

    async def write_if(
        self,
        what: str,
        path: str,
        body: Mapping[str, Any],
        *,
        version: str | None,
        method: str = "PUT",
        content_type: str | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A conditional write: made on ``version`` of the object, or a create (``None``).

        ``body`` is sent with ``version`` as its ``resourceVersion`` (a PUT, or a merge patch:
        the API server checks it either way); a create is a POST to ``path`` (the
        collection). The object changed, appeared or went meanwhile: :class:`WriteConflict`,
        for the caller to decide (never retried here); refused by the fence policy:
        :class:`NotOwner`; any other failure: :class:`AdapterUnavailable` (what the object
        holds now is unknown).
        """
        sent = dict(body)
        if version is not None:
            sent["metadata"] = {**(body.get("metadata") or {}), "resourceVersion": version}
        api = await self._transport()
        try:
            result = await api.request(
                "POST" if version is None else method,
                path,
                body=sent,
                content_type=content_type,
                query=query,
            )
        except ApiError as error:
            gone = version is not None and error.status == HTTPStatus.NOT_FOUND
            if is_conflict(error) or gone:
                raise self._errors.conflict(error, what, version) from error
            stamp = refused_stamp(error.message)
            if stamp is not None:
                raise self._errors.fenced(stamp, what) from error
            raise self._errors.unavailable(error, what) from error
        wrote()
        return result
