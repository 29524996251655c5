"""Self-contained kubeconfig files (credentials embedded as base64 data).

The files are written as JSON, which is valid YAML, so no YAML library is needed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    cluster: str = CLUSTER_NAME,
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
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    path.chmod(0o600)
    return path


def merge_kubeconfigs(path: Path, sources: Sequence[Path], *, current: str | None = None) -> Path:
    """Write one kubeconfig holding every cluster, user and context of ``sources``.

    Names must not repeat across the sources (each :class:`LocalCluster` names its entries
    after itself). ``current``: the current context (default: the first source's).
    """
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    for key in ("clusters", "users", "contexts"):
        merged[key] = []
    docs = [json.loads(source.read_text()) for source in sources]
    for doc in docs:
        for key in ("clusters", "users", "contexts"):
            names = {entry["name"] for entry in merged[key]}
            for entry in doc[key]:
                if entry["name"] in names:
                    raise ValueError(f"{key[:-1]} {entry['name']!r} is in several kubeconfigs")
                merged[key].append(entry)
    merged["current-context"] = current or (docs[0]["current-context"] if docs else "")
    path.write_text(json.dumps(merged, indent=2) + "\n")
    path.chmod(0o600)
    return path
