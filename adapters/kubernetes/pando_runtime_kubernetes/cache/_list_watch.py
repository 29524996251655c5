"""The API side of a watch loop: lists in pages and watches of one collection path.

:class:`ApiListWatch` is the :class:`~._watch.ListWatchSource` the adapter's cache and the
public controller use: a paged list (an expired continue token is :class:`~._watch.Gone`),
a watch with bookmarks and a jittered server timeout, and the newest version the server
holds (for a resumed loop's proof of catching up), asked once for many loops through a
:class:`SharedAnswer`. :class:`ConnectingListWatch` is the same over a transport made when
first needed (a warm start answers from its saved state before the client is loaded).
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import anyio

from .._log import logger
from ..api._errors import ApiError
from ..api._transport import KubeTransport
from ._watch import Gone, NewestVersion, Project, why

__all__ = [
    "INITIAL_EVENTS_END",
    "ApiListWatch",
    "Connect",
    "ConnectingListWatch",
    "SharedAnswer",
    "jittered",
]

_LOG = logger("watch")

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the bookmark that ends a streaming list's initial events."""

_NOTHING_CARRIES = "pando.dev/newest-version-probe"
"""A label no object carries: a streaming list selecting it sends only its closing bookmark."""


Connect = Callable[[], Awaitable[KubeTransport]]
"""The transport, made on first use (the session's connection)."""


class SharedAnswer:
    """One awaited answer for every caller: the first call asks, the others wait for it."""

    def __init__(self, ask: NewestVersion) -> None:
        self._ask = ask
        self._lock = anyio.Lock()
        self._asked = False
        self._answer: str | None = None

    async def __call__(self) -> str | None:
        async with self._lock:
            if not self._asked:
                self._answer = await self._ask()
                self._asked = True
        return self._answer


def jittered(timeout_seconds: int, draw: float) -> int:
    """A watch's timeout: ``timeout_seconds`` within ±10 % (``draw`` in [0, 1)), at least 1.

    Jitter spreads the reopening of many watches; 0 would leave the server's own (much
    longer) timeout in effect, past the client's read timeout.
    """
    return max(1, int(timeout_seconds * (0.9 + draw / 5)))


class ApiListWatch:
    """A :class:`ListWatchSource` over the API: one collection path and its selectors."""

    def __init__(
        self,
        transport: KubeTransport,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        timeout_seconds: int = 290,
    ) -> None:
        self.transport = transport
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.timeout_seconds = timeout_seconds

    async def list(self, project: Project) -> tuple[list[Any], str]:
        """Every object projected, in pages; an expired continue token raises :class:`Gone`."""
        items: list[Any] = []
        token: str | None = None
        while True:
            try:
                page = await self.transport.get(
                    self.path,
                    labelSelector=self.label_selector,
                    fieldSelector=self.field_selector,
                    limit=self.page_size,
                    **{"continue": token},
                )
            except ApiError as error:
                if error.status == HTTPStatus.GONE:
                    raise Gone(error.message) from error
                raise
            for item in page.pop("items", None) or ():  # whole objects live one page long
                kept = project(item)
                if kept is not None:
                    items.append(kept)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str((page.get("metadata") or {}).get("resourceVersion", ""))

    async def newest_version(self) -> str | None:
        """The newest version of the collection now: every change made before the call is under.

        Asked as a streaming list of what a label no object carries: the server waits until
        its cache is current, sends no object and at once the bookmark that ends the initial
        events, with that version. A server that refuses streaming lists (the ``WatchList``
        feature gate off: 1.33's default) is asked by a list of that label instead, a consistent
        read whose version is as good: a second call. ``None`` when it cannot say (a server that
        ignores the parameter sends no such bookmark: the watch ends after a second).
        """
        query = {
            "watch": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": 1,
            "labelSelector": _NOTHING_CARRIES,
        }
        try:
            async with self.transport.stream(self.path, query=query, read_timeout=31) as stream:
                async for event in _events(stream.receive):
                    meta = (event.get("object") or {}).get("metadata") or {}
                    ended = (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true"
                    if event.get("type") == "BOOKMARK" and ended:
                        return str(meta.get("resourceVersion") or "") or None
        except ApiError as error:
            if error.status not in (HTTPStatus.BAD_REQUEST, HTTPStatus.UNPROCESSABLE_ENTITY):
                _LOG.debug(
                    "the newest version is unknown (%s)", why(error), extra={"path": self.path}
                )
                return None
            return await self._newest_by_list()
        except (OSError, ValueError) as error:
            _LOG.debug("the newest version is unknown (%s)", why(error), extra={"path": self.path})
        return None

    async def _newest_by_list(self) -> str | None:
        """The newest version, from a list that selects nothing.

        No ``limit``: so it is served from the API server's cache where consistent reads from
        cache are on (1.31 and later).
        """
        try:
            page = await self.transport.get(self.path, labelSelector=_NOTHING_CARRIES)
        except (ApiError, OSError, ValueError) as error:
            _LOG.debug("the newest version is unknown (%s)", why(error), extra={"path": self.path})
            return None
        return str((page.get("metadata") or {}).get("resourceVersion") or "") or None

    @asynccontextmanager
    async def watch(
        self, resource_version: str, timeout_seconds: int | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """Watch from ``resource_version`` with bookmarks.

        The server ends it after a timeout (``timeout_seconds``, else the source's with
        jitter); a client read timeout above it catches a silent connection.
        """
        timeout = timeout_seconds or jittered(self.timeout_seconds, random.random())  # noqa: S311
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout,
            "labelSelector": self.label_selector,
            "fieldSelector": self.field_selector,
        }
        try:
            async with self.transport.stream(
                self.path, query=query, read_timeout=timeout + 30
            ) as stream:
                yield _events(stream.receive)
        except ApiError as error:
            if error.status == HTTPStatus.GONE:
                raise Gone(error.message) from error
            raise


async def _events(receive: Callable[[], Awaitable[bytes]]) -> AsyncIterator[dict[str, Any]]:
    """JSON lines from a chunked stream."""
    pending = b""
    while chunk := await receive():
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
    if pending.strip():
        yield json.loads(pending)


class ConnectingListWatch:
    """An :class:`ApiListWatch` on the transport ``connect`` gives when first used."""

    def __init__(self, connect: Connect, path: str, **options: Any) -> None:
        self._connect = connect
        self._path = path
        self._options = options
        self._source: ApiListWatch | None = None

    async def _api(self) -> ApiListWatch:
        if self._source is None:
            self._source = ApiListWatch(await self._connect(), self._path, **self._options)
        return self._source

    async def list(self, project: Project) -> tuple[list[Any], str]:
        """See :meth:`ApiListWatch.list`."""
        return await (await self._api()).list(project)

    async def newest_version(self) -> str | None:
        """See :meth:`ApiListWatch.newest_version`."""
        return await (await self._api()).newest_version()

    @asynccontextmanager
    async def watch(
        self, resource_version: str, timeout_seconds: int | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """See :meth:`ApiListWatch.watch`."""
        source = await self._api()
        async with source.watch(resource_version, timeout_seconds) as events:
            yield events
