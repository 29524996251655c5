"""The HTTP client every Consul call goes through: the address, the token, TLS, the timeout."""

from __future__ import annotations

from typing import Protocol

import httpx

from pando_runtime.plugin import TlsSettings, https_verify

__all__ = ["TLS_REMEDY", "consul_client", "datacenter_params"]

TLS_REMEDY = (
    "Check 'tls_ca' (the CA that signed Consul's certificate, which must name the address "
    "dialled), and 'tls_cert' and 'tls_key' when Consul verifies clients (https "
    "verify_incoming: a certificate of the CA in its ca_file)."
)


class ConsulSettings(TlsSettings, Protocol):
    """What the catalog's and the lease store's settings both say about reaching Consul."""

    @property
    def token(self) -> str | None: ...
    @property
    def datacenter(self) -> str | None: ...
    @property
    def timeout(self) -> float: ...


def consul_client(settings: ConsulSettings) -> httpx.AsyncClient:
    """A client of Consul's HTTP API; the token goes in a header, never in a URL."""
    headers = {"X-Consul-Token": settings.token} if settings.token else {}
    return httpx.AsyncClient(
        base_url=settings.address.rstrip("/"),
        headers=headers,
        timeout=settings.timeout,
        verify=https_verify(settings, "consul"),
    )


def datacenter_params(settings: ConsulSettings) -> dict[str, str]:
    """The query parameters naming the datacenter, when one is set."""
    return {"dc": settings.datacenter} if settings.datacenter else {}
