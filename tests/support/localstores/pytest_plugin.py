"""pytest plugin: session-wide lease-store servers (``postgres_server``, ``etcd_server``).

Load it with ``-p localstores.pytest_plugin``. A test that needs a server that cannot start
fails at setup, saying why; it is never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .servers import EtcdServer, PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster for the session, in a temporary directory."""
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One etcd member for the session, with a temporary data directory."""
    with EtcdServer() as server:
        yield server
