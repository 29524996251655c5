"""Kubeconfig files for unit tests: named contexts whose servers nothing listens on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def kubeconfig_file(path: Path, *contexts: str, current: str) -> Path:
    """Write a kubeconfig at ``path`` with one cluster and context per name; return the path.

    Each context's server is a loopback port below 1024 that no test server uses, so a call
    to it is refused at once.
    """
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": c, "cluster": {"server": f"https://127.0.0.1:{9 + i}"}}
            for i, c in enumerate(contexts)
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in contexts],
        "current-context": current,
    }
    path.write_text(yaml.safe_dump(doc))
    return path
