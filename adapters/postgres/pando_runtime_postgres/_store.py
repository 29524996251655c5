"""The PostgreSQL lease store: one row per lease, each version from one sequence.

psycopg 3's blocking connection runs in worker threads under the store's own
:class:`anyio.CapacityLimiter`, so the store works on asyncio and trio alike (psycopg's and
asyncpg's async connections are asyncio-only). Each statement is its own transaction
(autocommit) on the primary; a write is conditional in its ``WHERE`` (under READ COMMITTED the
second of two writers re-checks it after the first commits: one wins). A version is
``nextval`` of one sequence, so it never repeats, even after a delete, a re-create or a crash.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, Self, TypeVar

import anyio
import anyio.to_thread
import psycopg
from psycopg import sql

from pando_runtime import AdapterFailed, AdapterUnavailable
from pando_runtime.plugin import LeaseConflict, LeaseRecord, StoredLease

from ._info import PostgresLeaseConfig

__all__ = ["PostgresLeaseStore", "postgres_lease_store"]

T = TypeVar("T")

_UNREACHABLE = "Check that PostgreSQL runs at the store's conninfo and answers on its primary."

_SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS {sequence};
CREATE TABLE IF NOT EXISTS {table} (
    lease_group text NOT NULL,
    name text NOT NULL,
    holder text NOT NULL,
    renewals bigint NOT NULL,
    duration double precision NOT NULL,
    view text[] NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (lease_group, name)
)
"""
_COLUMNS = "name, holder, renewals, duration, view, version"


def postgres_lease_store(config: PostgresLeaseConfig) -> PostgresLeaseStore:
    """The factory ``load_lease_store("postgres", ...)`` calls."""
    return PostgresLeaseStore(config)


def _stored(row: tuple[Any, ...]) -> StoredLease:
    name, holder, renewals, duration, view, version = row
    record = LeaseRecord(
        holder=holder, renewals=int(renewals), duration=float(duration), view=tuple(view)
    )
    return StoredLease(name=name, record=record, version=str(version))


class _Connections:
    """Idle connections to reuse; one is dropped after any error (its state is unknown)."""

    def __init__(self, config: PostgresLeaseConfig) -> None:
        self._config = config
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._schema_ready = False
        self._closed = False

    def _connect(self) -> psycopg.Connection[Any]:
        config = self._config
        extra: dict[str, Any] = {
            # libpq refuses a standby: every read sees every write committed on the primary
            "target_session_attrs": "read-write",
            "connect_timeout": max(2, int(config.timeout + 0.999)),
            "application_name": "pando-runtime-leases",
        }
        if config.password is not None:
            extra["password"] = config.password
        connection = psycopg.connect(config.conninfo, autocommit=True, **extra)
        try:
            if not self._schema_ready:
                self._create_schema(connection)
                self._schema_ready = True
        except BaseException:
            connection.close()
            raise
        return connection

    def _create_schema(self, connection: psycopg.Connection[Any]) -> None:
        """The table and its sequence, when missing; a user that may not create needs neither."""
        table = self._config.table
        found = connection.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        if found is not None and found[0] is not None:
            return  # PostgreSQL checks the right to create before IF NOT EXISTS: skip it
        names = {"table": sql.Identifier(table), "sequence": sql.Identifier(f"{table}_versions")}
        # another replica may create them at the same moment
        with contextlib.suppress(psycopg.errors.UniqueViolation):
            connection.execute(sql.SQL(_SCHEMA).format(**names))

    def run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``work`` on an idle connection (or a new one); in a worker thread."""
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        if connection is None or connection.closed:
            connection = self._connect()
        try:
            result = work(connection)
        except BaseException:
            connection.close()
            raise
        with self._lock:
            if not self._closed:
                self._idle.append(connection)
                return result
        connection.close()  # a call abandoned at its timeout that returned after aclose
        return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class PostgresLeaseStore:
    """A :class:`~pando_runtime.plugin.LeaseStoreClient` over one PostgreSQL table.

    Every call ends within ``timeout`` seconds: a server that does not answer (stopped,
    frozen, cut off) is :class:`~pando_runtime.AdapterUnavailable`. A frozen server's worker
    thread is abandoned, not waited for; its connection is closed when the thread returns.
    """

    def __init__(self, config: PostgresLeaseConfig) -> None:
        self.config = config
        self._connections = _Connections(config)
        self._limiter = anyio.CapacityLimiter(config.connections)
        table = sql.Identifier(config.table)
        sequence = sql.Literal(f"{config.table}_versions")
        columns = sql.SQL(_COLUMNS)
        self._list = sql.SQL(
            "SELECT {columns} FROM {table} WHERE lease_group = %s ORDER BY name"
        ).format(columns=columns, table=table)
        self._read = sql.SQL(
            "SELECT {columns} FROM {table} WHERE lease_group = %s AND name = %s"
        ).format(columns=columns, table=table)
        self._create = sql.SQL(
            "INSERT INTO {table} (lease_group, name, holder, renewals, duration, view, version)"
            " VALUES (%s, %s, %s, %s, %s, %s, nextval({sequence}))"
            " ON CONFLICT DO NOTHING RETURNING {columns}"
        ).format(table=table, sequence=sequence, columns=columns)
        self._replace = sql.SQL(
            "UPDATE {table} SET holder = %s, renewals = %s, duration = %s, view = %s,"
            " version = nextval({sequence})"
            " WHERE lease_group = %s AND name = %s AND version = %s RETURNING {columns}"
        ).format(table=table, sequence=sequence, columns=columns)
        self._delete = sql.SQL(
            "DELETE FROM {table} WHERE lease_group = %s AND name = %s AND version = %s"
        ).format(table=table)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the idle connections (the table and its leases stay)."""
        await anyio.to_thread.run_sync(self._connections.close, limiter=self._limiter)

    async def _call(
        self, what: str, work: Callable[[psycopg.Connection[Any]], T], *, write: bool
    ) -> T:
        try:
            with anyio.fail_after(self.config.timeout):
                return await anyio.to_thread.run_sync(
                    self._connections.run, work, limiter=self._limiter, abandon_on_cancel=True
                )
        except TimeoutError:
            msg = f"{what}: PostgreSQL did not answer within {self.config.timeout:g} s"
            raise AdapterUnavailable(
                msg, remedy=_UNREACHABLE, details={"store": "postgres"}
            ) from None
        except psycopg.OperationalError as error:
            msg = f"{what}: PostgreSQL could not be reached: {_first_line(error)}"
            raise AdapterUnavailable(
                msg, remedy=_UNREACHABLE, details={"store": "postgres"}
            ) from None
        except psycopg.Error as error:
            failed = AdapterFailed if write else AdapterUnavailable
            msg = f"{what}: PostgreSQL refused it: {_first_line(error)}"
            raise failed(
                msg,
                remedy="Grant the store's user SELECT, INSERT, UPDATE, DELETE on the table and "
                "USAGE on its sequence (or let it create them).",
                details={"store": "postgres", "sqlstate": error.sqlstate},
            ) from None

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        def work(connection: psycopg.Connection[Any]) -> tuple[StoredLease, ...]:
            return tuple(_stored(row) for row in connection.execute(self._list, (group,)))

        return await self._call(f"list the {group} leases", work, write=False)

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        def work(connection: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            return connection.execute(self._read, (group, name)).fetchone()

        row = await self._call(f"read the lease of {name!r}", work, write=False)
        return None if row is None else _stored(row)

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        fields = (record.holder, record.renewals, record.duration, list(record.view))

        def work(connection: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            if version is None:
                return connection.execute(self._create, (group, name, *fields)).fetchone()
            return connection.execute(
                self._replace, (*fields, group, name, int(version))
            ).fetchone()

        row = await self._call(f"write the lease of {name!r}", work, write=True)
        if row is None:
            msg = f"lease {name!r} ({group}) is not at version {version}"
            raise LeaseConflict(msg, details={"lease": name, "group": group})
        return _stored(row)

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        def work(connection: psycopg.Connection[Any]) -> None:
            connection.execute(self._delete, (group, name, int(version)))

        await self._call(f"delete the lease of {name!r}", work, write=True)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
