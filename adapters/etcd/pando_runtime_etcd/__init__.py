"""etcd v3 as a lease store, over its HTTP/JSON gateway.

Loaded by name (``pr.load_lease_store("etcd", {...})``); see ``docs/replicas.md``.
"""

from __future__ import annotations

from ._info import ETCD, EtcdLeaseConfig

__all__ = ["ETCD", "EtcdLeaseConfig"]
