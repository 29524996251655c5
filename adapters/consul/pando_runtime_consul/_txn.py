"""The operations of Consul's transaction endpoint (``PUT /v1/txn``) the backend writes.

A transaction holds at most :data:`TXN_MAX_OPS` operations and is atomic: when one
operation fails, Consul rolls every one back and answers 409 with ``Errors``, one
``{"OpIndex": i, "What": "..."}`` per failed operation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pando_runtime.catalog import CatalogRegistration, CatalogWrite

__all__ = [
    "EXTERNAL_SOURCE",
    "MISSING_NODE",
    "TXN_MAX_OPS",
    "node_get_op",
    "node_set_op",
    "service_body",
    "service_op",
    "txn_errors",
]

TXN_MAX_OPS = 64
"""Operations per transaction: Consul's documented limit (the v1.14 agent accepts 128)."""

EXTERNAL_SOURCE = "pando-runtime"
"""Node metadata ``external-source`` of the synthetic nodes (Consul's UI shows it)."""

MISSING_NODE = "Missing node registration"
"""What Consul says of a service operation on a node that does not exist."""


def service_body(registration: CatalogRegistration) -> dict[str, Any]:
    """The ``Service`` of a registration, as both the catalog and the txn endpoints take it."""
    return {
        "ID": registration.service_id,
        "Service": registration.service,
        "Address": registration.address,
        "Port": registration.port,
        "Tags": list(registration.tags),
        "Meta": dict(registration.metadata),
    }


def service_op(write: CatalogWrite) -> dict[str, Any]:
    """A ``Service`` operation: ``set`` the registration, or ``delete`` it when removed.

    A delete names the service too: Consul checks the token's write right on the name.
    """
    registration = write.registration
    if write.remove:
        service = {"ID": registration.service_id, "Service": registration.service}
        return {"Service": {"Verb": "delete", "Node": registration.node, "Service": service}}
    body = service_body(registration)
    return {"Service": {"Verb": "set", "Node": registration.node, "Service": body}}


def node_get_op(node: str) -> dict[str, Any]:
    """A ``Node`` ``get``: fails (and names the node) when the node does not exist."""
    return {"Node": {"Verb": "get", "Node": {"Node": node}}}


def node_set_op(node: str, address: str) -> dict[str, Any]:
    """A ``Node`` ``set`` making a synthetic node, marked with ``external-source``."""
    body = {"Node": node, "Address": address, "Meta": {"external-source": EXTERNAL_SOURCE}}
    return {"Node": {"Verb": "set", "Node": body}}


def txn_errors(body: Any, ops: int) -> dict[int, str]:
    """The failed operations of a rolled-back transaction, by index (those in range)."""
    errors = body.get("Errors") if isinstance(body, Mapping) else None
    named: dict[int, str] = {}
    for error in errors if isinstance(errors, Sequence) else ():
        if not isinstance(error, Mapping):
            continue
        index = error.get("OpIndex")
        if isinstance(index, int) and 0 <= index < ops:
            named[index] = str(error.get("What") or "refused")
    return named
