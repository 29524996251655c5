"""Lease stores for the tests, each its own server on loopback in a temporary directory.

:class:`PostgresServer` (Debian's ``postgresql``: ``initdb`` and ``postgres`` as a non-root
user) and :class:`EtcdServer` (Debian's ``etcd-server``); the packages' services never run.
Each can be frozen (SIGSTOP to it and every process it started) and thawed. Consul is
``localconsul``'s agent.
"""

from __future__ import annotations

from .kit import StoreHarness, StoreMembershipConformance, served_again, two_clients
from .servers import EtcdServer, PostgresServer, StoreServerError

__all__ = [
    "EtcdServer",
    "PostgresServer",
    "StoreHarness",
    "StoreMembershipConformance",
    "StoreServerError",
    "served_again",
    "two_clients",
]
