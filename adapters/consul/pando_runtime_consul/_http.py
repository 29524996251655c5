"""The HTTP client every Consul call goes through: the address, the token, TLS, the timeout."""

from __future__ import annotations

from typing import Protocol

import httpx

__all__ = ["consul_client", "datacenter_params"]


class ConsulSettings(Protocol):
    """What the catalog's and the lease store's settings both say about reaching Consul."""

    @property
    def address(self) -> str: ...
    @property
    def token(self) -> str | None: ...
    @property
    def datacenter(self) -> str | None: ...
    @property
    def timeout(self) -> float: ...
    @property
    def verify(self) -> bool: ...


def consul_client(settings: ConsulSettings) -> httpx.AsyncClient:
    """A client of Consul's HTTP API; the token goes in a header, never in a URL."""
    headers = {"X-Consul-Token": settings.token} if settings.token else {}
    return httpx.AsyncClient(
        base_url=settings.address.rstrip("/"),
        headers=headers,
        timeout=settings.timeout,
        verify=settings.verify,
    )


def datacenter_params(settings: ConsulSettings) -> dict[str, str]:
    """The query parameters naming the datacenter, when one is set."""
    return {"dc": settings.datacenter} if settings.datacenter else {}
