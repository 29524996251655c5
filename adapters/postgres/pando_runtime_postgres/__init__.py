"""PostgreSQL as a lease store: a leases table whose versions come from one sequence.

Loaded by name (``pr.load_lease_store("postgres", {...})``); see ``docs/replicas.md``.
"""

from __future__ import annotations

from ._info import POSTGRES, PostgresLeaseConfig
from ._store import PostgresLeaseStore

__all__ = ["POSTGRES", "PostgresLeaseConfig", "PostgresLeaseStore"]
