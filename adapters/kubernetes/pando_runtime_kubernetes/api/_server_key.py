"""What a cluster's configuration says of its API server: the key of a warm start's store.

A warm start opens its saved cache before it connects, so the store is keyed by what the
configuration says, read without the official client: the API server's URL and a fingerprint
of the certificate authority it is trusted by (:class:`ServerKey`). Two clusters reached at
the same URL through the same CA are told apart only once connected (the cache checks the
cluster's UID then). The same key is computed from a kubeconfig context
(:func:`key_from_kubeconfig`: YAML and the files it names, no client) and from a loaded
client ``Configuration`` (:func:`key_from_configuration`), so either finds the other's store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ._clusters import IN_CLUSTER, SERVICE_ACCOUNT_DIR, SERVICE_HOST_ENV
from ._kubeconfig import MergedKubeconfig, kubeconfig_paths

if TYPE_CHECKING:
    from kubernetes.client import Configuration

__all__ = ["ServerKey", "ca_fingerprint", "key_from_configuration", "key_from_kubeconfig"]

SERVICE_PORT_ENV = "KUBERNETES_SERVICE_PORT"

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)


@attrs.frozen
class ServerKey:
    """A cluster as its configuration names it: ``cluster`` (its name), ``server``, ``ca``."""

    cluster: str
    """The context's name (``in-cluster`` for a pod's own): the store's file is named by it."""
    server: str
    """The API server's URL, without a trailing slash."""
    ca: str
    """``sha256:<hex>`` of the CA certificates trusted (their DER), ``system`` when none is
    named (the system's trust store), ``insecure`` when TLS is not verified, ``none`` over
    plain HTTP."""


def ca_fingerprint(server: str, ca: bytes | None, *, insecure: bool) -> str:
    """:attr:`ServerKey.ca` for ``server`` trusting ``ca`` (PEM; ``None``: the system's)."""
    if not server.startswith("https"):
        return "none"
    if insecure:
        return "insecure"
    if ca is None:
        return "system"
    try:
        blocks = [base64.b64decode(b"".join(block.split())) for block in _PEM.findall(ca)]
    except (binascii.Error, ValueError):
        blocks = []
    return "sha256:" + hashlib.sha256(b"".join(blocks) if blocks else ca).hexdigest()


def _in_cluster(environ: Mapping[str, str], directory: Path) -> ServerKey | None:
    host, port = environ.get(SERVICE_HOST_ENV), environ.get(SERVICE_PORT_ENV)
    if not host or not port:
        return None
    joined = f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"
    server = f"https://{joined}"
    ca = (directory / "ca.crt").read_bytes()
    return ServerKey(IN_CLUSTER, server, ca_fingerprint(server, ca, insecure=False))


def key_from_kubeconfig(
    kubeconfig: str | os.PathLike[str] | None,
    context: str | None,
    *,
    environ: Mapping[str, str] | None = None,
    service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT_DIR,
) -> ServerKey | None:
    """The key of the cluster ``Cluster.load(kubeconfig, context)`` loads, without the client.

    The same choice of cluster: ``context``, else the current context, else the pod's own
    (no ``kubeconfig`` given, running in a pod). ``None`` when that cannot be told from the
    files alone (no such context, a file or CA that cannot be read): connect first, then.
    """
    env = os.environ if environ is None else environ
    try:
        if context == IN_CLUSTER:
            return _in_cluster(env, Path(service_account_dir))
        merged = MergedKubeconfig.read(
            kubeconfig_paths(kubeconfig, env), report_missing=kubeconfig is not None
        )
        name = context or merged.current_context
        if name is None:
            in_pod = kubeconfig is None and bool(env.get(SERVICE_HOST_ENV))
            return _in_cluster(env, Path(service_account_dir)) if in_pod else None
        said = merged.server(name)
    except (OSError, ValueError):
        return None
    if said is None:
        return None
    server, ca, insecure = said
    server = server.rstrip("/")
    return ServerKey(name, server, ca_fingerprint(server, ca, insecure=insecure))


def key_from_configuration(cluster: str, configuration: Configuration) -> ServerKey:
    """The key of a loaded client ``Configuration`` named ``cluster``.

    Raises ``OSError`` when its CA file cannot be read.
    """
    server = str(configuration.host).rstrip("/")
    ca_file = configuration.ssl_ca_cert
    ca = Path(ca_file).read_bytes() if ca_file else None
    insecure = not configuration.verify_ssl
    return ServerKey(cluster, server, ca_fingerprint(server, ca, insecure=insecure))
