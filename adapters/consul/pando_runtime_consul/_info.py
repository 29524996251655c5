"""What the Consul backend says about itself, and its settings (attrs only: light)."""

from __future__ import annotations

import attrs

from pando_runtime import CatalogInfo, setting

__all__ = ["CONSUL", "ConsulConfig"]


@attrs.frozen(kw_only=True)
class ConsulConfig:
    """Settings of the Consul catalog backend."""

    address: str = setting(
        default="http://127.0.0.1:8500", help="Consul's HTTP API: http(s)://host:port"
    )
    token: str | None = setting(
        default=None, secret=True, help="ACL token (sent as X-Consul-Token); none: anonymous"
    )
    datacenter: str | None = setting(default=None, help="datacenter; none: the agent's own")
    node_address: str = setting(
        default="127.0.0.1", help="address given to the synthetic nodes registrations live on"
    )
    timeout: float = setting(default=10.0, help="seconds per HTTP call")
    verify: bool = setting(default=True, help="verify the TLS certificate of an https address")


CONSUL = CatalogInfo(
    name="consul",
    description="Consul's catalog, written through its HTTP API on a synthetic node.",
    factory="pando_runtime_consul._backend:consul_catalog",
    config_class=ConsulConfig,
    distribution="pando-runtime-consul",
)
