"""A session's writes: retried where RBAC caches refuse them, conditional where asked, counted.

Applies, creates and deletes of one cluster, with the fence token of the task's member (a
stalled writer's write is refused, never landed); what was written is put in the cache at
once (write-through).

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

from pando_runtime import AdapterFailed

from .._log import logger
from ..api._errors import ApiError
from ..api._paths import api_path, object_path
from ..api._transport import KubeTransport
from ._api_reads import ApiReads
from ._cluster_cache import ClusterCache
from ._connection import ClusterConnection
from ._errors import ClusterErrors, WriteConflict, is_conflict
from ._fence_token import FenceToken, current_token, refused_stamp, stamp_of, with_token

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
    """The writes of one cluster, over the session's transport, in the contract's errors.

    ``api``: direct reads (what exists after a refused create; a namespace's stamp);
    ``cache``: told what was written; ``field_manager``: the server-side apply's manager.
    """

    def __init__(
        self,
        connection: ClusterConnection,
        errors: ClusterErrors,
        api: ApiReads,
        cache: ClusterCache,
        field_manager: str,
    ) -> None:
        self._connection = connection
        self._errors = errors
        self._api = api
        self._cache = cache
        self._field_manager = field_manager

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
        api = await self._connection.transport()
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
                extra={"cluster": self._connection.log_name, "status": 403, "attempt": attempt + 1},
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
        api = await self._connection.transport()
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

    async def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply ``body``; what the server returns is in the cache at once."""
        what = f"apply {body['kind']} {body['metadata']['name']}"
        path, body = object_path(body), with_token(body, creating=False)
        manager = self._field_manager
        result = await self.write(what, lambda api: api.apply(path, body, manager))
        self._cache.remember(result)
        return result

    async def create(self, body: Mapping[str, Any], what: str | None = None) -> dict[str, Any]:
        """POST ``body``; :class:`AdapterFailed` when it fails (see :meth:`create_or_find`)."""
        what = what or f"create {body['kind']} {body['metadata']['name']}"
        path, body = object_path(body, named=False), with_token(body, creating=True)
        return await self.write(what, lambda api: api.request("POST", path, body=body))

    async def create_or_find(
        self, body: Mapping[str, Any], what: str, *, retry_forbidden: bool = True
    ) -> tuple[bool, dict[str, Any] | None]:
        """POST ``body``; when an object of its name exists already, that object instead.

        Returns ``(True, created)``, or ``(False, existing)`` where ``existing`` is ``None``
        when it was deleted between the refused create and the read. What was created is
        remembered; what existed is the caller's to judge (it may belong to something else).
        """
        path, body = object_path(body, named=False), with_token(body, creating=True)
        api = await self._connection.transport()
        try:
            created = await self.write(
                what,
                lambda _: api.request("POST", path, body=body),
                retry_forbidden=retry_forbidden,
            )
        except AdapterFailed as failed:
            if failed.__cause__ is None or not is_conflict(failed.__cause__):
                raise
        else:
            self._cache.remember(created)
            return True, created
        existing = await self._api.find(
            object_path(body), f"read {body['kind']} {body['metadata']['name']}"
        )
        return False, existing

    async def delete(
        self,
        ns: str | None,
        plural: str,
        name: str,
        group: str = "",
        *,
        grace: int | None = None,
        version: str | None = None,
    ) -> None:
        """Delete one object; one that is gone (or already going) is no error.

        ``version``: only that version of it (:class:`WriteConflict` when it changed). A
        member's delete of its app's namespace is made on the version that carries its
        stamp (:class:`NotOwner` when the stamp moved on): a stalled destroy cannot land.
        """
        what = f"delete {plural}/{name}"
        token = current_token()
        if (
            version is None
            and token is not None
            and (plural, name) == ("namespaces", token.namespace)
        ):
            for _ in range(3):  # the namespace changed otherwise (a label): read its stamp again
                with contextlib.suppress(WriteConflict):
                    version = await self._stamped_version(token, what)
                    await self._delete(ns, plural, name, group, grace, version)
                    return
            raise self._errors.down(f"cannot {what}: it keeps changing", remedy="Destroy again.")
        await self._delete(ns, plural, name, group, grace, version)

    async def _delete(  # noqa: PLR0917 - delete's parts, once
        self,
        ns: str | None,
        plural: str,
        name: str,
        group: str,
        grace: int | None,
        version: str | None,
    ) -> None:
        api = await self._connection.transport()
        query = {"gracePeriodSeconds": grace} if grace is not None else None
        body = {"preconditions": {"resourceVersion": version}} if version is not None else None
        try:
            result = await api.request(
                "DELETE", api_path(ns, plural, name, group), query=query, body=body
            )
        except ApiError as error:
            if version is not None and is_conflict(error):
                raise self._errors.conflict(error, f"delete {plural}/{name}", version) from error
            if error.status in (HTTPStatus.NOT_FOUND, HTTPStatus.CONFLICT):
                return
            raise self._errors.failed(error, f"delete {plural}/{name}") from error
        wrote()
        if result.get("kind") == "Pod":
            self._cache.remember(result)
        elif plural == "services" and ns:
            self._cache.forget_service(ns, name)

    async def _stamped_version(self, token: FenceToken, what: str) -> str | None:
        """The namespace's version now, if it carries ``token``'s stamp (else NotOwner)."""
        body = await self._api.find(api_path(None, "namespaces", token.namespace), what)
        if body is None:
            return None
        stamp = stamp_of(body)
        if stamp != token.stamp:
            raise self._errors.fenced(stamp or "", what)
        return str((body.get("metadata") or {}).get("resourceVersion") or "") or None
