"""Pure translation of plans into Engine requests: names, labels, the spec hash (private)."""

from ._containers import (
    ContainerRequest,
    LogCap,
    container_request,
    files_digest,
    files_tar,
    health_test,
)
from ._egress import BLOCKED_RANGES, guard_chain, guard_request, guard_script
from ._labels import Naming
from ._networks import free_subnet, network_request

__all__ = [
    "BLOCKED_RANGES",
    "ContainerRequest",
    "LogCap",
    "Naming",
    "container_request",
    "files_digest",
    "files_tar",
    "free_subnet",
    "guard_chain",
    "guard_request",
    "guard_script",
    "health_test",
    "network_request",
]
