"""What an administrator does on a local cluster for the Kubernetes adapter, typed.

Shared by the Kubernetes adapter's tests and the benchmarks (which import no test module):
an admin client of a kubeconfig, the adapter's grants (``deploy/rbac.yaml`` bound to a user),
a create that tolerates "already exists", and the raw response of a call made without
preloading (the official client annotates every call with its decoded model).
"""

from __future__ import annotations

from ._client import admin_client, unread
from ._grants import (
    BINDING,
    DEPLOY,
    EDGE_NAMESPACE,
    SERVER_NAMESPACE,
    created,
    grant_adapter,
    grant_role_in,
)

__all__ = [
    "BINDING",
    "DEPLOY",
    "EDGE_NAMESPACE",
    "SERVER_NAMESPACE",
    "admin_client",
    "created",
    "grant_adapter",
    "grant_role_in",
    "unread",
]
