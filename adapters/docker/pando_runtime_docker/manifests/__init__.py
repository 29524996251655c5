"""Pure translation of plans into Engine requests: names, labels, the spec hash (private)."""

from ._containers import (
    GRANTABLE_CAPABILITIES,
    ContainerRequest,
    LogCap,
    container_request,
    files_digest,
    files_tar,
    hardening,
    health_test,
)
from ._edge import CERT_DIR, EdgeNames, EdgeRequest, edge_network_request, edge_request
from ._egress import BLOCKED_RANGES, guard_chain, guard_request, guard_script, host_chain
from ._gateway import (
    GATEWAY_ALIAS,
    GATEWAY_PORT,
    UNROUTED_RESOLVER,
    GatewayNames,
    config_digest,
    gateway_files,
    gateway_request,
    outbound_network_request,
    proxy_env,
    squid_config,
)
from ._labels import Naming
from ._networks import free_subnet, network_request
from ._private import Allowed, edge_bridge, private_chain, private_script, release_script

__all__ = [
    "BLOCKED_RANGES",
    "CERT_DIR",
    "GATEWAY_ALIAS",
    "GATEWAY_PORT",
    "GRANTABLE_CAPABILITIES",
    "UNROUTED_RESOLVER",
    "Allowed",
    "ContainerRequest",
    "EdgeNames",
    "EdgeRequest",
    "GatewayNames",
    "LogCap",
    "Naming",
    "config_digest",
    "container_request",
    "edge_bridge",
    "edge_network_request",
    "edge_request",
    "files_digest",
    "files_tar",
    "free_subnet",
    "gateway_files",
    "gateway_request",
    "guard_chain",
    "guard_request",
    "guard_script",
    "hardening",
    "health_test",
    "host_chain",
    "network_request",
    "outbound_network_request",
    "private_chain",
    "private_script",
    "proxy_env",
    "release_script",
    "squid_config",
]
