"""Docker contexts, read as the Docker CLI writes them.

The configuration folder is ``$DOCKER_CONFIG`` (else ``~/.docker``). A context named ``N``
lives in ``contexts/meta/<sha256 of N>/meta.json`` (its name and its ``docker`` endpoint:
``Host``, ``SkipTLSVerify``) and, when it has TLS material, in
``contexts/tls/<sha256 of N>/docker/`` (``ca.pem``, ``cert.pem``, ``key.pem``). The current
context is ``currentContext`` in ``config.json``; ``default`` is the built-in one (the local
socket), which has no folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

__all__ = ["DEFAULT_CONTEXT", "ContextError", "DockerContext", "config_dir", "current_context"]

DEFAULT_CONTEXT = "default"


class ContextError(ValueError):
    """A context cannot be read; the message says why in words."""


@attrs.frozen(kw_only=True)
class DockerContext:
    """One context's Docker endpoint."""

    name: str
    host: str
    skip_tls_verify: bool = False
    tls_dir: Path | None = None
    """The folder of its TLS files, when it holds any."""

    @classmethod
    def read(cls, folder: Path, name: str) -> DockerContext:
        """The context ``name`` of the configuration folder ``folder``.

        Raises:
            ContextError: it does not exist, or its files cannot be read.
        """
        digest = hashlib.sha256(name.encode()).hexdigest()
        meta_file = folder / "contexts" / "meta" / digest / "meta.json"
        try:
            meta = json.loads(meta_file.read_text())
        except FileNotFoundError:
            known = ", ".join(context_names(folder)) or "none"
            msg = f"no Docker context named {name!r} in {folder} (known: {known})"
            raise ContextError(msg) from None
        except (OSError, ValueError) as error:
            msg = f"the Docker context {name!r} cannot be read ({meta_file}: {error})"
            raise ContextError(msg) from None
        endpoint = _docker_endpoint(meta)
        host = endpoint.get("Host")
        if not isinstance(host, str) or not host:
            msg = f"the Docker context {name!r} has no Docker endpoint host ({meta_file})"
            raise ContextError(msg)
        tls_dir = folder / "contexts" / "tls" / digest / "docker"
        has_tls = any((tls_dir / f).is_file() for f in ("ca.pem", "cert.pem", "key.pem"))
        return cls(
            name=name,
            host=host,
            skip_tls_verify=bool(endpoint.get("SkipTLSVerify")),
            tls_dir=tls_dir if has_tls else None,
        )


def _docker_endpoint(meta: Any) -> Mapping[str, Any]:
    endpoints = meta.get("Endpoints") if isinstance(meta, dict) else None
    docker = endpoints.get("docker") if isinstance(endpoints, dict) else None
    return docker if isinstance(docker, dict) else {}


def config_dir(setting: str | None, environ: Mapping[str, str]) -> Path:
    """The Docker CLI's configuration folder: the setting, ``$DOCKER_CONFIG``, ``~/.docker``."""
    chosen = setting or environ.get("DOCKER_CONFIG")
    return Path(chosen).expanduser() if chosen else Path.home() / ".docker"


def current_context(folder: Path) -> str | None:
    """``currentContext`` of ``config.json`` (``None``: unset, or no such file)."""
    try:
        data = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    name = data.get("currentContext") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else None


def context_names(folder: Path) -> list[str]:
    """Names of the contexts stored in ``folder``."""
    names = []
    for meta in sorted((folder / "contexts" / "meta").glob("*/meta.json")):
        try:
            name = json.loads(meta.read_text()).get("Name")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(name, str):
            names.append(name)
    return sorted(names)
