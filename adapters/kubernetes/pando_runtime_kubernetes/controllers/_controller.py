"""A public watch controller: a resource, upsert/delete callbacks per key, retried.

Built on the adapter's own list-then-watch loop and keyed work queue (``cache``): a
host's controller and the adapter's cache share one implementation. The controller keeps
a projection of each object (only the fields its callbacks need) by key
(``namespace/name``, or ``name`` for cluster-scoped kinds), hands every change of a
projection to ``upsert(key, obj)`` and every removal to ``delete(key, last_obj)``, one
key at a time, and retries a failing key with exponential backoff.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, Generic, TypeVar

import anyio
import attrs

from ..api._transport import KubeTransport
from ..cache._list_watch import ApiListWatch
from ..cache._watch import ListWatchSource, WatchLoop
from ..cache._work_queue import WorkQueue

__all__ = ["Controller", "Resource"]

log = logging.getLogger("pando_runtime_kubernetes.controller")
log.addHandler(logging.NullHandler())

T = TypeVar("T")


@attrs.frozen(kw_only=True)
class Resource:
    """What a controller lists and watches: one kind, optionally one namespace, selected."""

    version: str
    """API version, ``v1``."""
    plural: str
    """The kind's plural, ``services``."""
    group: str = ""
    """API group, ``networking.k8s.io``; empty for the core group."""
    namespace: str | None = None
    """One namespace; ``None``: every namespace (or a cluster-scoped kind)."""
    label_selector: str | None = None
    field_selector: str | None = None

    @property
    def path(self) -> str:
        """The collection's API path."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespace:
            return f"{root}/namespaces/{self.namespace}/{self.plural}"
        return f"{root}/{self.plural}"


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object (client-go's key)."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name", "")
    return f"{namespace}/{name}" if namespace else str(name)


def _whole(obj: dict[str, Any]) -> Any:
    return obj


class _Store(Generic[T]):
    """The projections by key, fed by the watch loop; queues each key whose projection moved."""

    def __init__(
        self, project: Callable[[dict[str, Any]], T | None], queue: WorkQueue[str]
    ) -> None:
        self._project = project
        self._queue = queue
        self.items: dict[str, T] = {}
        self.tombstones: dict[str, T] = {}
        """Removed objects whose ``delete`` has not succeeded yet."""
        self.initial: set[str] | None = None
        """Keys of the first list not handed to a callback yet (``None`` before it)."""

    def project(self, obj: dict[str, Any]) -> tuple[str, T] | None:
        kept = self._project(obj)
        return None if kept is None else (object_key(obj), kept)

    def _put(self, key: str, kept: T) -> None:
        self.tombstones.pop(key, None)
        if self.items.get(key, _MISSING) != kept:
            self.items[key] = kept
            self._queue.add(key)

    def _remove(self, key: str) -> None:
        old = self.items.pop(key, _MISSING)
        if old is not _MISSING:
            self.tombstones[key] = old
            self._queue.add(key)

    def on_list(self, items: list[tuple[str, T]], relist: bool) -> None:
        fresh = dict(items)
        for key in [k for k in self.items if k not in fresh]:
            self._remove(key)
        for key, kept in fresh.items():
            self._put(key, kept)
        if self.initial is None:
            self.initial = set(fresh)

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        kept = self._project(obj) if kind != "DELETED" else None
        if kept is None:  # deleted, or no longer of interest: gone for the callbacks
            self._remove(key)
        else:
            self._put(key, kept)


_MISSING: Any = object()


class Controller(Generic[T]):
    """Watches one :class:`Resource` and calls back per key until stopped.

    ``upsert(key, obj)`` is awaited for each key whose projection is new or changed;
    ``delete(key, last_obj)`` when its object is gone (or projects to ``None``). A callback
    that raises is retried for that key with exponential backoff (``max_retries`` times,
    then dropped and counted in :attr:`dropped`); other keys go on. ``project`` keeps what
    the callbacks need of an object (the whole object by default; ``None``: not of
    interest), so a controller of thousands of objects holds thousands of small values.

    ``background`` tasks run as long as the controller and are cancelled and awaited when
    it stops. Run it with ``async with controller.running():`` or ``await controller.run()``
    in a task group.
    """

    def __init__(
        self,
        transport: KubeTransport | None,
        resource: Resource,
        *,
        upsert: Callable[[str, T], Awaitable[None]],
        delete: Callable[[str, T], Awaitable[None]],
        project: Callable[[dict[str, Any]], T | None] = _whole,
        background: Iterable[Callable[[], Coroutine[Any, Any, None]]] = (),
        source: ListWatchSource | None = None,
        max_retries: int = 10,
        backoff_initial: float = 0.05,
        backoff_max: float = 30.0,
        watch_timeout: int = 290,
    ) -> None:
        if source is None:
            if transport is None:
                msg = "a controller needs a transport or a list/watch source"
                raise ValueError(msg)
            source = ApiListWatch(
                transport,
                resource.path,
                label_selector=resource.label_selector,
                field_selector=resource.field_selector,
                timeout_seconds=watch_timeout,
            )
        self.resource = resource
        self._upsert = upsert
        self._delete = delete
        self._background = tuple(background)
        self.queue: WorkQueue[str] = WorkQueue(
            max_retries=max_retries, backoff_initial=backoff_initial, backoff_max=backoff_max
        )
        self._store: _Store[T] = _Store(project, self.queue)
        self.loop = WatchLoop(source, self._store, name=resource.plural)
        self._synced = anyio.Event()
        self.errors = 0
        """Callback failures so far (each retried, up to ``max_retries`` per key)."""

    # -- what hosts read ------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        """The first list is in, and every key of it has been handed to a callback once."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Wait until :attr:`has_synced`."""
        await self._synced.wait()

    @property
    def last_sync_resource_version(self) -> str:
        """The resourceVersion of the last list or event seen (``""`` before any)."""
        return self.loop.resource_version

    @property
    def healthy(self) -> bool:
        """The watch is connected (false while it backs off from an error)."""
        return self.loop.healthy

    @property
    def dropped(self) -> int:
        """Keys given up after ``max_retries`` failed callbacks."""
        return self.queue.dropped

    def get(self, key: str) -> T | None:
        """The projection of ``key`` now, or ``None``."""
        return self._store.items.get(key)

    def items(self) -> dict[str, T]:
        """Every projection by key (a copy)."""
        return dict(self._store.items)

    # -- running ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Controller[T]]:
        """Run the controller for the duration of the block."""
        async with anyio.create_task_group() as group:
            group.start_soon(self.run)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()

    async def run(self) -> None:
        """Watch, call back and run the background tasks until cancelled (then await them)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self.loop.run)
            for task in self._background:
                group.start_soon(task)
            group.start_soon(self._watch_initial)
            await self.queue.run(self._process, on_error=self._failed)

    async def _watch_initial(self) -> None:
        await self.loop.synced.wait()
        self._check_initial()

    def _check_initial(self) -> None:
        if self._store.initial is not None and not self._store.initial:
            self._synced.set()

    def _failed(self, key: str, error: Exception) -> None:
        self.errors += 1
        log.warning("%s %s: callback failed, retrying: %s", self.resource.plural, key, error)

    async def _process(self, key: str) -> None:
        try:
            kept = self._store.items.get(key, _MISSING)
            if kept is not _MISSING:
                await self._upsert(key, kept)
            elif key in self._store.tombstones:
                await self._delete(key, self._store.tombstones[key])
                self._store.tombstones.pop(key, None)
        finally:
            # A first-list key counts as handed over after its first attempt (or it would
            # hold has_synced back forever when its callback keeps failing).
            initial = self._store.initial
            if initial is not None and key in initial:
                initial.discard(key)
                self._check_initial()
