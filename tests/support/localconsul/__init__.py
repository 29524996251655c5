"""A real Consul agent on loopback for the catalog sync tests.

``consul`` is built from pinned Go modules by ``tools/consul/build.sh`` (cached outside
the repository) unless ``PANDO_CONSUL_BIN`` names a directory holding it. An agent runs in
``-dev`` mode (a single server, state in memory), bound to 127.0.0.1 with every port
chosen free, and is stopped with ``consul leave`` (it exits 1 on SIGTERM).
"""

from __future__ import annotations

from .agent import ConsulAgent, ConsulError, find_consul

__all__ = ["ConsulAgent", "ConsulError", "find_consul"]
