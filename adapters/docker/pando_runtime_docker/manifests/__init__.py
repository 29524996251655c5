"""Pure translation of plans into Engine requests: names, labels, the spec hash (private)."""

from ._containers import (
    ContainerRequest,
    LogCap,
    container_request,
    files_digest,
    files_tar,
    health_test,
)
from ._labels import Naming
from ._networks import free_subnet, network_request

__all__ = [
    "ContainerRequest",
    "LogCap",
    "Naming",
    "container_request",
    "files_digest",
    "files_tar",
    "free_subnet",
    "health_test",
    "network_request",
]
