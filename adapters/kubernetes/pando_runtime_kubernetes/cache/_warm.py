"""The lean cache kept on disk (``cache_dir``), so a restarted adapter resumes its watches.

One SQLite file per cluster, in WAL mode (standard library, crash-safe transactions, readers
never block the writer). It holds one row per app namespace (the projected facts of its pods,
gateway pods, Services, namespace and claims, as JSON lists of their slots' values, never API
objects) and each watch's resource version and last confirmation (``meta``'s ``confirmed``:
when the state at that version was last proved current, so a restart may answer from it at
once, saying how old it is), written together in one transaction: whatever a crash leaves is
a state the watches can resume from. A flusher writes what changed (the
namespaces the stores were told of) about once a second, in one batched transaction, and
once more on close; a relist rewrites everything once.

Safety: the ``meta`` table names the schema (the projections' fields), the adapter's version,
the API server's URL and the fingerprint of the CA it is trusted by (what the configuration
says, known before connecting: :class:`~..api._server_key.ServerKey`), and the cluster (the
``kube-system`` namespace's UID, known once connected). A store of another schema, version,
server or CA is not opened; a store that fails SQLite's integrity check or never finished a
first flush is discarded; each with a warning. The UID is checked once connected, before any
watch resumes (:meth:`WarmCache.verify`): a store of another cluster is discarded then (the
stores emptied, everything listed, ``MISSED`` told), with a warning. A lock file (``flock``)
refuses a second process on the same file.

It logs on ``pando_runtime.kubernetes.warm``: INFO for what it loaded, WARNING for what it
ignored or discarded.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs

from pando_runtime import AdapterUnavailable

from .._info import adapter_version
from .._log import logger
from ..api._server_key import ServerKey
from ._informer import Informer
from ._projections import ClaimFacts, GatewayFacts, NamespaceFacts, PodFacts, _shared
from ._resume import resume
from ._stores import CacheState

__all__ = [
    "SCHEMA",
    "DiskCache",
    "Identity",
    "WarmCache",
    "adapter_version",
    "identity_of",
    "open_warm",
]

_LOG = logger("warm")


def _names(cls: Any) -> list[str]:
    """A projection's fields, in their order (the store's columns)."""
    return [field.name for field in attrs.fields(cls)]


_CLASSES: dict[str, Any] = {
    "p": PodFacts,
    "g": GatewayFacts,
    "n": NamespaceFacts,
    "c": ClaimFacts,
}

SCHEMA = (
    "1:"
    + hashlib.sha256(
        json.dumps({key: _names(cls) for key, cls in _CLASSES.items()}).encode()
    ).hexdigest()[:16]
)
"""The store's layout and the projections' fields: a store of another schema is ignored."""


Identity = dict[str, str]
"""What a store must have been written for to be opened: ``schema``, ``adapter``, ``server``,
``ca`` (its ``cluster_uid`` is checked once connected)."""

_WHAT = {
    "schema": "schema",
    "adapter": "adapter version",
    "server": "API server",
    "ca": "certificate authority",
    "cluster_uid": "cluster",
}


def identity_of(key: ServerKey) -> Identity:
    """The identity a store of the cluster ``key`` names is opened by."""
    return {"schema": SCHEMA, "adapter": adapter_version(), "server": key.server, "ca": key.ca}


def _encode(facts: Any) -> list[Any]:
    return [getattr(facts, name) for name in _names(type(facts))]


def _decode(key: str, values: list[Any]) -> Any:
    cls = _CLASSES[key]
    fields = dict(zip(_names(cls), values, strict=True))
    if key == "p":
        fields["claims"] = tuple(fields["claims"])
        fields["limits"] = _shared(tuple(fields["limits"]))
        if fields["reserved"] is not None:
            fields["reserved"] = _shared(tuple(fields["reserved"]))
        if fields["stuck"] is not None:
            fields["stuck"] = tuple(fields["stuck"])
    elif key == "n":
        fields["workloads"] = tuple(fields["workloads"])
        fields["exposed"] = tuple(fields["exposed"])
    return cls(**fields)


def _row(informer: Informer, namespace: str) -> str | None:
    """One namespace's facts as JSON (``None``: nothing of it is cached)."""
    row: dict[str, Any] = {}
    pods = informer.pods.by_namespace.get(namespace)
    if pods:
        row["p"] = [_encode(f) for f in pods.values()]
    gateways = informer.gateways.by_namespace.get(namespace)
    if gateways:
        row["g"] = [_encode(f) for f in gateways.values()]
    services = informer.services.by_namespace.get(namespace)
    if services:
        row["s"] = list(services)
    facts = informer.namespaces.by_name.get(namespace)
    if facts is not None:
        row["n"] = [_encode(facts)]
    claims = informer.claims.by_namespace.get(namespace)
    if claims:
        row["c"] = [_encode(f) for f in claims.values()]
    return json.dumps(row, separators=(",", ":")) if row else None


def _namespaces(informer: Informer) -> set[str]:
    return {
        *informer.pods.by_namespace,
        *informer.gateways.by_namespace,
        *informer.services.by_namespace,
        *informer.namespaces.by_name,
        *informer.claims.by_namespace,
    }


def _state(versions: dict[str, str], rows: Iterable[tuple[str, str]]) -> CacheState:
    state = CacheState(
        versions=versions, pods=[], gateways=[], services=[], namespaces=[], claims=[]
    )
    lists: dict[str, list[Any]] = {
        "p": state.pods,
        "g": state.gateways,
        "n": state.namespaces,
        "c": state.claims,
    }
    for namespace, data in rows:
        row = json.loads(data)
        for key, kept in lists.items():
            kept.extend(_decode(key, values) for values in row.get(key, ()))
        state.services.extend((namespace, name) for name in row.get("s", ()))
    return state


def _file_name(cluster: str | None) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster or "default")
    return f"cache-{name}.sqlite"


class DiskCache:
    """The SQLite file of one cluster's cache: open (locked), load, write, close (blocking)."""

    def __init__(self, directory: Path, cluster: str | None = None) -> None:
        self.path = directory / _file_name(cluster)
        self.lock_path = self.path.with_suffix(".lock")
        self._db: sqlite3.Connection | None = None
        self._lock: int | None = None
        self.saved_uid: str | None = None
        """The cluster UID the loaded store was written for (``None``: none loaded)."""

    def open(self) -> None:
        """Take the lock, then open the file; refused (coded) when another process holds it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise AdapterUnavailable(
                f"cannot use the cache directory: {error.strerror}",
                remedy="Set 'cache_dir' to a directory this process may write, or unset it.",
                details={"cache_dir": str(self.path.parent)},
            ) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AdapterUnavailable(
                "another process uses this cache directory for this cluster",
                remedy="Give each adapter process its own 'cache_dir' (or stop the other one).",
                details={"cache_dir": str(self.path.parent), "lock": self.lock_path.name},
            ) from None
        self._lock = fd

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _discard(self, why: str) -> None:
        _LOG.warning(
            "the saved cache is not used (%s): listing everything instead",
            why,
            extra={"file": self.path.name, "reason": why},
        )
        if self._db is not None:
            self._db.close()
            self._db = None
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{self.path}{suffix}").unlink()

    def load(self, identity: Identity) -> CacheState | None:
        """The saved state when the file is sound and of ``identity``; else ``None``.

        Whatever is not used is deleted; the file is then ready for :meth:`write`.
        """
        existed = self.path.exists()
        state: CacheState | None = None
        try:
            self._db = self._connect()
            if existed:
                state = self._read(identity)
        except sqlite3.DatabaseError as error:
            self._discard(f"unreadable: {type(error).__name__}")
        if self._db is None:
            self._db = self._connect()
        if state is None:
            self._create(identity)
        return state

    def _read(self, identity: Identity) -> CacheState | None:
        db = self._db
        assert db is not None  # noqa: S101 - opened by load
        check = db.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            self._discard("it fails the integrity check")
            return None
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"meta", "versions", "facts"} <= tables:
            self._discard("it was never completely written")
            return None
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("flushed") != "1":
            self._discard("it was never completely written")
            return None
        for key, expected in identity.items():
            if meta.get(key) != expected:
                self._discard(f"it was written for another {_WHAT.get(key, key)}")
                return None
        self.saved_uid = meta.get("cluster_uid")
        versions = dict(db.execute("SELECT kind, version FROM versions").fetchall())
        state = _state(versions, db.execute("SELECT namespace, data FROM facts"))
        state.confirmed = _confirmations(meta.get("confirmed"))
        _LOG.info(
            "loaded the saved cache: apps: %d",
            len(state.namespaces),
            extra={"file": self.path.name, "versions": versions},
        )
        return state

    def _create(self, identity: Identity) -> None:
        db = self._db
        assert db is not None  # noqa: S101 - opened by load
        with _transaction(db):
            db.execute("DROP TABLE IF EXISTS meta")
            db.execute("DROP TABLE IF EXISTS versions")
            db.execute("DROP TABLE IF EXISTS facts")
            db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute("CREATE TABLE versions (kind TEXT PRIMARY KEY, version TEXT NOT NULL)")
            db.execute("CREATE TABLE facts (namespace TEXT PRIMARY KEY, data TEXT NOT NULL)")
            db.executemany("INSERT INTO meta VALUES (?, ?)", [*identity.items(), ("flushed", "0")])

    def record_uid(self, cluster_uid: str) -> None:
        """Name the cluster (its UID, checked once connected) the store is written for."""
        db = self._db
        if db is not None:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('cluster_uid', ?)", (cluster_uid,))

    def discard(self, identity: Identity, cluster_uid: str) -> None:
        """Drop everything saved: the store was another cluster's; it is now ``cluster_uid``'s."""
        self.saved_uid = None
        if self._db is not None:
            self._create(identity)
            self.record_uid(cluster_uid)

    def write(
        self,
        versions: dict[str, str],
        rows: dict[str, str | None],
        *,
        everything: bool,
        confirmed: dict[str, datetime] | None = None,
    ) -> None:
        """One transaction: the changed rows (``None``: delete), the versions, the marker.

        ``everything``: ``rows`` is the whole state (after a list); the rest is dropped.
        ``confirmed``: each watch's last confirmation of the state at its version.
        """
        db = self._db
        if db is None:
            return
        with _transaction(db):
            if everything:
                db.execute("DELETE FROM facts")
            db.executemany(
                "DELETE FROM facts WHERE namespace = ?",
                [(ns,) for ns, data in rows.items() if data is None],
            )
            db.executemany(
                "INSERT OR REPLACE INTO facts VALUES (?, ?)",
                [(ns, data) for ns, data in rows.items() if data is not None],
            )
            db.execute("DELETE FROM versions")
            db.executemany("INSERT INTO versions VALUES (?, ?)", versions.items())
            if confirmed is not None:
                times = {kind: when.isoformat() for kind, when in confirmed.items()}
                db.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('confirmed', ?)",
                    (json.dumps(times, sort_keys=True),),
                )
            db.execute("UPDATE meta SET value = '1' WHERE key = 'flushed'")

    def close(self) -> None:
        """Close the file and release the lock. Safe to call twice."""
        db, self._db = self._db, None
        if db is not None:
            db.close()
        fd, self._lock = self._lock, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _confirmations(saved: str | None) -> dict[str, datetime]:
    """The saved confirmation times (none when absent or unreadable: reads then wait)."""
    if not saved:
        return {}
    try:
        times = json.loads(saved)
        confirmed = {str(kind): datetime.fromisoformat(when) for kind, when in times.items()}
    except (ValueError, TypeError, AttributeError):
        return {}
    return {kind: when for kind, when in confirmed.items() if when.tzinfo is not None}


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Any:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class WarmCache:
    """Keeps an :class:`Informer`'s stores in a :class:`DiskCache` while :meth:`running`.

    It is the informer's journal: told each namespace that changed, it writes those rows
    (and every watch's version) in one transaction per ``interval``, and a last time on
    exit. A watch whose version is not known yet (no list) holds the flush back.
    ``identity``: what the store was opened for; ``resumed``: the informer holds its saved
    state, not yet checked against the cluster (:meth:`verify`).
    """

    def __init__(
        self,
        disk: DiskCache,
        informer: Informer,
        interval: float = 1.0,
        *,
        identity: Identity | None = None,
        resumed: bool = False,
    ) -> None:
        self.disk = disk
        self.informer = informer
        self.interval = interval
        self.identity = identity or {}
        self.resumed = resumed
        self.flushes = 0
        self._dirty: set[str] = set()
        self._everything = False
        self._versions: dict[str, str] = {}
        self._confirmed: dict[str, datetime] = {}
        self._lock = anyio.Lock()
        informer.namespace_changed.add(self.touch)

    def touch(self, namespace: str | None) -> None:
        """``namespace`` changed (``None``: everything did)."""
        if namespace is None:
            self._everything = True
            self._dirty.clear()
        elif not self._everything:
            self._dirty.add(namespace)

    def _pending(
        self,
    ) -> tuple[dict[str, str], dict[str, str | None], bool, dict[str, datetime]] | None:
        """What to write now, taken synchronously: rows, versions and confirmations agree."""
        loops = self.informer.loops.values()
        versions = {loop.name: loop.resource_version for loop in loops}
        if not all(versions.values()):
            return None
        confirmed = self.informer.staleness.confirmations()
        if (
            not (self._dirty or self._everything)
            and versions == self._versions
            and confirmed == self._confirmed
        ):
            return None
        everything = self._everything
        names = _namespaces(self.informer) if everything else self._dirty
        rows = {ns: _row(self.informer, ns) for ns in names}
        if everything:
            rows = {ns: data for ns, data in rows.items() if data is not None}
        self._dirty, self._everything, self._versions = set(), False, versions
        self._confirmed = confirmed
        return versions, rows, everything, confirmed

    async def verify(self, cluster_uid: str) -> bool:
        """Once connected, before any watch resumes: whether the saved state is this cluster's.

        A resumed state saved for another cluster (another UID behind the same server and CA)
        is discarded: the informer's stores are emptied and every watch lists (its first
        events stream says ``MISSED``), the file is emptied for ``cluster_uid``, and a WARNING
        says so. Otherwise ``cluster_uid`` is recorded in the store. Checked once.
        """
        async with self._lock:
            resumed, self.resumed = self.resumed, False
            if resumed and self.disk.saved_uid != cluster_uid:
                _LOG.warning(
                    "the saved cache is another cluster's (same API server and CA, another "
                    "UID): discarded, listing everything; observe may have answered from it "
                    "until now, each answer with its confirmed_at",
                    extra={"file": self.disk.path.name, "reason": "another cluster"},
                )
                self.informer.discard_saved()
                self._dirty, self._everything = set(), True
                self._versions, self._confirmed = {}, {}
                await anyio.to_thread.run_sync(
                    lambda: self.disk.discard(self.identity, cluster_uid)
                )
                return False
            await anyio.to_thread.run_sync(lambda: self.disk.record_uid(cluster_uid))
            return resumed

    async def flush(self) -> None:
        """Write what changed since the last flush (nothing when nothing did)."""
        async with self._lock:
            pending = self._pending()
            if pending is None:
                return
            versions, rows, everything, confirmed = pending
            try:
                await anyio.to_thread.run_sync(
                    lambda: self.disk.write(
                        versions, rows, everything=everything, confirmed=confirmed
                    )
                )
            except BaseException:
                self._everything = True  # what was taken is written whole next time
                raise
            self.flushes += 1

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[WarmCache]:
        """Flush every ``interval`` during the block, once more at its end, then close."""
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._flusher)
                try:
                    yield self
                finally:
                    group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._flush_or_warn()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.disk.close)

    async def _flusher(self) -> None:
        while True:
            await anyio.sleep(self.interval)
            await self._flush_or_warn()

    async def _flush_or_warn(self) -> None:
        try:
            await self.flush()
        except (sqlite3.Error, OSError) as error:  # a full disk: the cache serves from memory
            _LOG.warning(
                "cannot write the saved cache (%s): the next flush writes it whole",
                type(error).__name__,
                extra={"file": self.disk.path.name},
            )


async def open_warm(
    stack: contextlib.AsyncExitStack,
    informer: Informer,
    disk: DiskCache,
    identity: Identity,
) -> WarmCache:
    """Resume ``informer`` from ``disk`` if this adapter saved it for this server and CA.

    Before connecting: the cluster's UID is checked by :meth:`WarmCache.verify` once
    connected. It is saved again while ``stack`` is open; the disk is closed with the stack.
    """
    await anyio.to_thread.run_sync(disk.open)
    stack.callback(disk.close)
    state = await anyio.to_thread.run_sync(lambda: disk.load(identity))
    resumed = state is not None and set(state.versions) >= set(informer.loops)
    if state is not None and resumed:
        resume(informer, state)
    warm = WarmCache(disk, informer, identity=identity, resumed=resumed)
    await stack.enter_async_context(warm.running())
    return warm
