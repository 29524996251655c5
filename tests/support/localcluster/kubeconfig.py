"""Self-contained kubeconfig files (credentials embedded as base64 data).

The files are written as JSON, which is valid YAML, so no YAML library is needed.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

CLUSTER_NAME = "pando-local"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_cert: Path,
    user: str,
    context: str,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    token: str | None = None,
) -> Path:
    """Write a kubeconfig with one cluster, one user and one (current) context."""
    credentials: dict[str, str] = {}
    if client_cert is not None and client_key is not None:
        credentials["client-certificate-data"] = _b64(client_cert)
        credentials["client-key-data"] = _b64(client_key)
    if token is not None:
        credentials["token"] = token
    if not credentials:
        raise ValueError("a kubeconfig needs a client certificate and key, or a token")
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": context,
        "preferences": {},
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    path.chmod(0o600)
    return path
