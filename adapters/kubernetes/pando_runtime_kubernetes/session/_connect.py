"""Transports to a cluster made from the adapter's settings (threads, timeouts, API rate)."""

from __future__ import annotations

import urllib.parse

from .._info import KubernetesConfig
from ..api._clusters import ApiRate, Cluster
from ..api._server_key import ServerKey, key_from_kubeconfig
from ..api._transport import KubeTransport

__all__ = ["build_transport", "kubeconfig_key", "server_address", "transport_to"]


def server_address(host: str) -> str:
    """The API server's address as a log may say it: scheme, host and port, nothing else."""
    url = urllib.parse.urlsplit(host)
    return f"{url.scheme}://{url.hostname}{f':{url.port}' if url.port else ''}"


def transport_to(cluster: Cluster, config: KubernetesConfig) -> KubeTransport:
    """A transport to ``cluster`` (at its own API rate) with the settings' threads and timeouts."""
    return KubeTransport.for_cluster(
        cluster,
        max_threads=config.max_threads,
        max_streams=config.max_streams,
        connect_timeout=config.connect_timeout,
        read_timeout=config.read_timeout,
        rate_limit_wait=config.rate_limit_wait,
    )


def build_transport(config: KubernetesConfig) -> KubeTransport:
    """A transport to the cluster the settings name (reads the kubeconfig: blocking)."""
    rate = ApiRate(qps=config.api_qps, burst=config.api_burst)
    return transport_to(Cluster.load(config.kubeconfig, config.context, rate=rate), config)


def kubeconfig_key(config: KubernetesConfig) -> ServerKey | None:
    """The server the settings' cluster is, from its kubeconfig alone (no client; blocking)."""
    return key_from_kubeconfig(config.kubeconfig, config.context)
