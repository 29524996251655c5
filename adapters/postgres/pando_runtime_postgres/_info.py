"""What the PostgreSQL lease store says about itself, and its settings (attrs only: light)."""

from __future__ import annotations

import re

import attrs

from pando_runtime import InvalidConfig, Problem
from pando_runtime.plugin import LeaseStoreInfo, setting

__all__ = ["POSTGRES", "PostgresLeaseConfig"]

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,48}")
_PASSWORD_IN_CONNINFO = re.compile(r"(^|\s)password\s*=|://[^/@]*:[^/@]*@", re.IGNORECASE)


def _problems(config: PostgresLeaseConfig) -> list[Problem]:
    problems = []
    if not _IDENTIFIER.fullmatch(config.table):
        problems.append(
            Problem(
                "table", "must be a lower-case SQL identifier of at most 49 characters", "invalid"
            )
        )
    if _PASSWORD_IN_CONNINFO.search(config.conninfo):
        # the conninfo is not secret and may be logged: the password has a setting of its own
        problems.append(Problem("conninfo", "must not hold a password: set `password`", "invalid"))
    return problems


@attrs.frozen(kw_only=True)
class PostgresLeaseConfig:
    """Settings of the PostgreSQL lease store.

    Checked on creation: a table name that is not a plain identifier, or a password written
    into ``conninfo``, raises :class:`~pando_runtime.InvalidConfig` naming it.
    """

    conninfo: str = setting(
        default="",
        help=(
            "libpq connection string or URL of the primary, without the password "
            "(host=... port=... dbname=... user=...); empty: libpq's defaults and PG* variables"
        ),
    )
    password: str | None = setting(
        default=None, secret=True, help="the user's password; none: libpq's own (.pgpass)"
    )
    table: str = setting(
        default="pando_leases",
        help="the leases table (created with its sequence <table>_versions when missing)",
    )
    timeout: float = setting(
        default=10.0,
        exclusive_minimum=0,
        maximum=3600,
        help="seconds a call may take, connecting included",
    )
    connections: int = setting(
        default=4, minimum=1, maximum=64, help="connections (and worker threads) at most"
    )

    def __attrs_post_init__(self) -> None:
        if problems := _problems(self):
            raise InvalidConfig("the postgres lease store settings are not valid", problems)


POSTGRES = LeaseStoreInfo(
    name="postgres",
    description="Leases in a PostgreSQL table, versions from one sequence, on the primary.",
    factory="pando_runtime_postgres._store:postgres_lease_store",
    config_class=PostgresLeaseConfig,
    api_version="1.7",
    reads=(
        "every call runs on the primary (target_session_attrs=read-write) in its own "
        "transaction; a read is linearizable on one primary, or with synchronous replication"
    ),
    distribution="pando-runtime-postgres",
)
