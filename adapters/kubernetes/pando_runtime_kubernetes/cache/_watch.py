"""A reusable list-then-watch loop (its source: ``_list_watch``; its work queue: ``_work_queue``).

The loop is client-go's reflector in miniature: list, then watch from the
list's ``resourceVersion`` with bookmarks; when the server ends a watch (its
timeout) reopen it from the last version seen, without relisting; on ``410
Gone`` (the version is too old) relist; on any other error back off
exponentially and retry. Its handler learns every list (``relist=True`` after
the first: events may have been missed) and every event, synchronously, so a
cache fed by it is updated before anything else looks.

The loop and its helpers run as tasks of a task group that lives exactly as
long as the owner's ``async with`` block (structured: nothing outlives it). The
adapter's cache and the public :class:`~pando_runtime_kubernetes.Controller` both
run on them.

It logs on ``pando_runtime.kubernetes.watch``: INFO for a relist (after 410, or
when asked), WARNING when a list or watch fails (events may be missed until it
is back), DEBUG for a first list and a watch the server ended; and tells its
``on_restart`` each start over (``gone``, ``error``, ``requested``).

A loop may also :meth:`~WatchLoop.resume` from a version its handler's state was saved at
(a warm start): it then watches from there without listing, and counts as synced only once
the server has confirmed it caught up: its first bookmark, an event at or past the newest
version the server had when the loop resumed (events come in order, so every earlier one has
been sent), or a short watch the server ended with nothing to send; a ``410 Gone`` falls back
to a list, which the handler learns as a relist (events may have been missed while it was down).
A saved state found not to be the cluster's (:meth:`~WatchLoop.discard_saved`, before the loop
runs) is not resumed: the loop lists, as a relist too.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from http import HTTPStatus
from typing import Any, Protocol

import anyio

from .._log import logger
from ..api._errors import ApiError

__all__ = [
    "Gone",
    "ListWatchSource",
    "NewestVersion",
    "Project",
    "WatchHandler",
    "WatchLoop",
    "at_or_past",
    "why",
]

_LOG = logger("watch")


class Gone(Exception):
    """The resource version is too old: relist."""


Project = Callable[[dict[str, Any]], Any]
"""What a handler keeps of one listed object (``None``: nothing)."""

NewestVersion = Callable[[], Awaitable[str | None]]
"""The newest version the server holds now (``None``: it cannot say)."""


def at_or_past(version: str, newest: str) -> bool:
    """Whether ``version`` is ``newest`` or later.

    Versions are compared only as the integers (etcd revisions) the API server gives;
    anything else is never taken as proof.
    """
    try:
        return int(version) >= int(newest)
    except ValueError:
        return False


class ListWatchSource(Protocol):
    """Where a watch loop lists and watches (the API; a fake in unit tests)."""

    async def list(self, project: Project) -> tuple[list[Any], str]:
        """Every object now, projected (``None`` dropped), and the collection's resourceVersion.

        Objects are projected as they arrive, so that a list never holds more whole objects
        than one page of them.
        """
        ...

    def watch(
        self, resource_version: str, timeout_seconds: int | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]:
        """Events after ``resource_version`` (``{"type": ..., "object": ...}``).

        They last until the server ends the watch (after ``timeout_seconds``, when given);
        raises :class:`Gone` when the version is too old.
        """
        ...


class WatchHandler(Protocol):
    """What a watch loop feeds."""

    def project(self, obj: dict[str, Any]) -> Any:
        """What the handler keeps of one listed object (``None``: nothing)."""

    def on_list(self, items: list[Any], relist: bool) -> None:
        """Replace everything with ``items`` (projections); ``relist``: events may be missed."""

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """One ``ADDED``, ``MODIFIED`` or ``DELETED`` event."""


def why(error: BaseException) -> str:
    """An error as a log may say it: its status or its type, never a server's message."""
    if isinstance(error, ApiError):
        return f"status {error.status}" if error.status else "no answer"
    if isinstance(error, Gone):
        return "410 Gone"
    return type(error).__name__


def _version(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    return meta.get("resourceVersion") if isinstance(meta, Mapping) else None


class WatchLoop:
    """List, then watch; reopen, relist and back off as needed, until cancelled.

    ``synced`` is set once the first list is in the handler (or, resumed, once the
    server confirmed the watch caught up: ``ready``); ``healthy`` is false while the
    loop cannot reach the API (readers then fall back to a direct read, which reports
    the outage). ``start`` says how it started: ``cold`` (listed), ``warm`` (resumed
    and caught up, ``replayed`` events on the way) or ``relisted`` (the resumed version
    had expired).
    """

    catch_up_timeout = 1
    """Seconds of a resumed loop's first watches. The server sends a bookmark only when its
    own newest version for the kind is past the watch's, so a bookmark, or an event at or past
    the newest version it had when the loop resumed (a busy cluster sends one soon), proves
    the loop caught up; so does such a watch ended by the server with nothing sent at all.
    One that sent only older events (the last may be the newest, or the server may have ended
    it before it had sent them all) is opened again from its last event."""

    side_proof_after = 0.2
    """Seconds after a catch-up watch opened that :meth:`_prove_sent_everything` starts."""

    def __init__(
        self,
        source: ListWatchSource,
        handler: WatchHandler,
        *,
        name: str = "watch",
        backoff_initial: float = 0.2,
        backoff_max: float = 10.0,
        relist_after_failures: int = 3,
        on_restart: Callable[[str], None] | None = None,
        log_extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.source = source
        self.handler = handler
        self.name = name
        self.synced = anyio.Event()
        self.healthy = False
        self.last_error: BaseException | None = None
        self.lists = 0
        self.alive_at = 0.0
        """When (``anyio.current_time()``) the API last proved this watch current: a list, an
        opened watch, an event or a bookmark (or a probe answered while it was connected)."""
        self.resource_version = ""
        self.saved_at: float | None = None
        """Resumed from a saved cache: when (``anyio.current_time()``, earlier than the start)
        the saved state was last confirmed; it stands for the loop's proof until it caught up."""
        self.ready = False
        self.start = "cold"
        self.replayed = 0
        self._resuming = False
        self._newest_version: NewestVersion | None = None
        self._newest: str | None = None
        self._sent = 0
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._relist_after = relist_after_failures
        self._relist_requested = False
        self._failures = 0
        self._watch_scope: anyio.CancelScope | None = None
        self._on_restart = on_restart
        self._extra = {"watch": name, **(log_extra or {})}
        self._relist_reason = "requested"

    def _restarted(self, reason: str) -> None:
        if self._on_restart is not None:
            self._on_restart(reason)

    def resume(
        self,
        resource_version: str,
        newest_version: NewestVersion | None = None,
        saved_at: float | None = None,
    ) -> None:
        """Before :meth:`run`: the handler holds the state at ``resource_version``; watch on.

        ``newest_version``, when given, is asked once as the loop starts: an event at or past
        its answer proves the loop caught up. ``saved_at``: when that state was last
        confirmed (see :attr:`proved_at`).
        """
        self.resource_version = resource_version
        self.saved_at = saved_at
        self._resuming = True
        self._newest_version = newest_version
        self.start = "warm"

    def discard_saved(self) -> None:
        """Before :meth:`run`: the saved state is not the cluster's; list first.

        Its owner empties the handler; the loop no longer stands for the saved state and
        lists before it watches, which the handler learns as a relist (events may have been
        missed: ``MISSED``); ``start`` says ``discarded``.
        """
        self.saved_at = None
        self.resource_version = ""
        self._newest_version = None
        self._relist_requested = True
        self._relist_reason = "discarded"
        self.start = "discarded"

    def proved_alive(self, at: float) -> None:
        """The API proved this watch current at ``at`` (a probe answered while it was open)."""
        self.alive_at = max(self.alive_at, at)

    @property
    def serves_saved(self) -> bool:
        """Resumed from a saved state confirmed at a known time, and not caught up yet."""
        return self._resuming and self.saved_at is not None

    @property
    def proved_at(self) -> float:
        """When the state the handler holds was last proved current.

        While a resumed loop catches up, its opened watch and replayed events prove nothing
        (more may follow): the saved confirmation stands until the loop caught up.
        """
        if self._resuming and self.saved_at is not None:
            return self.saved_at
        return self.alive_at

    def request_relist(self) -> None:
        """Relist now: the current watch is left at once."""
        self._relist_requested = True
        self._relist_reason = "requested"
        self._restarted("requested")
        if self._watch_scope is not None:
            self._watch_scope.cancel()

    async def _backoff(self, error: BaseException, what: str) -> None:
        self.healthy = False
        self.last_error = error
        self._failures += 1
        delay = min(self._backoff_max, self._backoff_initial * 2 ** (self._failures - 1))
        delay *= 0.5 + random.random() / 2  # noqa: S311 - jitter only
        self._restarted("error")
        _LOG.warning(
            "the %s %s failed (%s): retrying in %.1f s; events may be missed until then",
            self.name,
            what,
            why(error),
            delay,
            extra={**self._extra, "failures": self._failures},
        )
        await anyio.sleep(delay)

    async def _list(self) -> None:
        items, version = await self.source.list(self.handler.project)
        self.resource_version = version
        relist = self.lists > 0 or self._resuming
        if self._resuming:
            self._resuming = False
            self.start = "discarded" if self.start == "discarded" else "relisted"
        self.handler.on_list(items, relist=relist)
        _LOG.log(
            logging.INFO if relist else logging.DEBUG,
            "%s %s: objects: %d",
            "relisted" if relist else "listed",
            self.name,
            len(items),
            extra={**self._extra, "objects": len(items), "reason": self._relist_reason},
        )
        self.lists += 1
        self.ready = True
        self.healthy = True
        self.alive_at = anyio.current_time()
        self._failures = 0
        self.synced.set()

    def _caught_up(self) -> None:
        self._resuming = False
        self.ready = True
        self._failures = 0
        self.synced.set()
        _LOG.info(
            "the %s watch resumed from the saved cache and caught up: events replayed: %d",
            self.name,
            self.replayed,
            extra={**self._extra, "replayed": self.replayed, "version": self.resource_version},
        )

    async def _watch_once(self) -> None:
        """One watch, from the last version to the server's end of it."""
        if not self._resuming:
            await self._follow(self.source.watch(self.resource_version))
            return
        failure: Exception | None = None
        async with anyio.create_task_group() as side:
            side.start_soon(self._prove_sent_everything)
            try:
                await self._follow(self.source.watch(self.resource_version, self.catch_up_timeout))
            except Exception as error:  # noqa: BLE001 - raised below, as it came (not grouped)
                failure = error
                side.cancel_scope.cancel()
            if self.synced.is_set():  # caught up during the watch: no proof needed
                side.cancel_scope.cancel()
            # else the side proof, if it opened its watch, has a second at most to say
        if failure is not None:
            raise failure

    async def _prove_sent_everything(self) -> None:
        """Prove, a second sooner, that a catch-up watch which replayed events sent them all.

        Shortly after it opened (when a replay has usually arrived), a second short watch
        from the version reached so far is opened; if the server ends it with nothing to send,
        nothing newer existed when it opened, so the loop caught up. Otherwise nothing is
        proved here and the catch-up watch decides as before. Its events are not applied:
        the catch-up watch delivers the same ones.
        """
        await anyio.sleep(self.side_proof_after)
        if not self._resuming or not self._sent or self._relist_requested:
            return
        version = self.resource_version
        try:
            async with self.source.watch(version, self.catch_up_timeout) as events:
                async for event in events:
                    if event.get("type") != "BOOKMARK":
                        return  # something after ``version``: no proof here
        except (ApiError, Gone, OSError, ValueError):
            return
        if self._resuming and not self._relist_requested:
            self._caught_up()

    async def _follow(
        self, watch: AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]
    ) -> None:
        """Apply a watch's events until the server ends it."""
        self._sent = 0
        async with watch as events:
            self.healthy = True
            self.alive_at = anyio.current_time()
            async for event in events:
                self.alive_at = anyio.current_time()
                if self._relist_requested:
                    return
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == HTTPStatus.GONE:
                        raise Gone(obj.get("message", "gone"))
                    raise ApiError(int(obj.get("code") or 0), str(obj.get("message", "")))
                version = _version(obj)
                if version:
                    self.resource_version = version
                if kind == "BOOKMARK":
                    if self._resuming:
                        self._caught_up()
                    continue
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._changed(kind, obj, version)
                self._failures = 0

    def _changed(self, kind: str, obj: dict[str, Any], version: str | None) -> None:
        self.handler.on_event(kind, obj)
        self._sent += 1
        if self._resuming:
            self.replayed += 1
            if version and self._newest and at_or_past(version, self._newest):
                self._caught_up()

    async def run(self) -> None:
        """Run until cancelled."""
        need_list = not self._resuming
        if self._resuming and self._newest_version is not None:
            self._newest = await self._newest_version()
        while True:
            if need_list or self._relist_requested:
                self._relist_requested = False
                try:
                    await self._list()
                except (ApiError, Gone, OSError, ValueError) as error:
                    await self._backoff(error, "list")
                    continue
                need_list = False
            try:
                with anyio.CancelScope() as self._watch_scope:
                    await self._watch_once()
            except Gone:
                need_list = True
                self._relist_reason = "gone"
                self._restarted("gone")
                _LOG.info(
                    "the %s watch's version is too old (410): relisting",
                    self.name,
                    extra={**self._extra, "status": HTTPStatus.GONE.value},
                )
            except (ApiError, OSError, ValueError) as error:
                await self._backoff(error, "watch")
                # A watch that keeps failing may be stuck on a version: start over.
                need_list = self._failures >= self._relist_after
                self._relist_reason = "failures"
            else:
                if self._resuming and not self._relist_requested and not self._sent:
                    # Nothing newer to send, not even a bookmark: the version is the newest.
                    self._caught_up()
                elif not self._relist_requested:
                    _LOG.debug(
                        "the %s watch ended; reopening from version %s",
                        self.name,
                        self.resource_version,
                        extra=self._extra,
                    )
            finally:
                self._watch_scope = None
