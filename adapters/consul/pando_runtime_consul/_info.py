"""What the Consul backend says about itself, and its settings (attrs only: light)."""

from __future__ import annotations

from urllib.parse import urlsplit

import attrs

from pando_runtime import InvalidConfig, Problem
from pando_runtime.catalog import CatalogInfo
from pando_runtime.plugin import LeaseStoreInfo, https_context, setting

__all__ = [
    "CONSUL",
    "CONSUL_LEASES",
    "SOCKET_TIMEOUT_MAX",
    "ConsulConfig",
    "ConsulLeaseConfig",
]


SOCKET_TIMEOUT_MAX = 86_400
"""The most seconds an HTTP call may take (a day); the operating system refuses socket
timeouts not far above."""


def _address_problems(address: str) -> list[Problem]:
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [Problem("address", f"{address!r} is not an http(s)://host:port URL", "invalid")]
    if parts.path not in ("", "/") or parts.query:
        return [Problem("address", "must not have a path or query", "invalid")]
    return []


def _problems(config: ConsulConfig) -> list[Problem]:
    problems = _address_problems(config.address) or https_context(config)[1]
    if not config.node_address:
        problems.append(Problem("node_address", "must not be empty", "required"))
    return problems


@attrs.frozen(kw_only=True)
class ConsulConfig:
    """Settings of the Consul catalog backend.

    Checked on creation: an address that is no http(s) URL or an empty node address raises
    :class:`~pando_runtime.InvalidConfig` naming it (``timeout``'s range is checked where
    the settings are structured, with the other problems).
    """

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
    timeout: float = setting(
        default=10.0,
        exclusive_minimum=0,
        maximum=SOCKET_TIMEOUT_MAX,
        help="seconds per HTTP call",
    )
    verify: bool = setting(default=True, help="verify the TLS certificate of an https address")
    tls_ca: str | None = setting(
        default=None, help="CA file (PEM) Consul's certificate is signed by; none: the system's"
    )
    tls_cert: str | None = setting(
        default=None, help="client certificate file (PEM), for Consul's https verify_incoming"
    )
    tls_key: str | None = setting(
        default=None, help="the client certificate's private key file (PEM, mode 0600)"
    )

    def __attrs_post_init__(self) -> None:
        if problems := _problems(self):
            raise InvalidConfig("the consul catalog settings are not valid", problems)


CONSUL = CatalogInfo(
    name="consul",
    description="Consul's catalog, written through its HTTP API on a synthetic node.",
    factory="pando_runtime_consul._backend:consul_catalog",
    config_class=ConsulConfig,
    distribution="pando-runtime-consul",
)


def _lease_problems(config: ConsulLeaseConfig) -> list[Problem]:
    problems = _address_problems(config.address) or https_context(config)[1]
    if config.prefix.startswith("/") or not config.prefix.endswith("/"):
        problems.append(Problem("prefix", "must not start and must end with '/'", "invalid"))
    return problems


@attrs.frozen(kw_only=True)
class ConsulLeaseConfig:
    """Settings of the Consul lease store (leases as KV entries).

    Checked on creation: an address that is no http(s) URL or a prefix that starts with, or
    does not end in, ``/`` raises :class:`~pando_runtime.InvalidConfig` naming it.
    """

    address: str = setting(
        default="http://127.0.0.1:8500", help="Consul's HTTP API: http(s)://host:port"
    )
    token: str | None = setting(
        default=None, secret=True, help="ACL token (sent as X-Consul-Token); none: anonymous"
    )
    datacenter: str | None = setting(default=None, help="datacenter; none: the agent's own")
    prefix: str = setting(default="pando/leases/", help="the KV keys' prefix, ending in '/'")
    timeout: float = setting(
        default=10.0,
        exclusive_minimum=0,
        maximum=SOCKET_TIMEOUT_MAX,
        help="seconds per HTTP call",
    )
    verify: bool = setting(default=True, help="verify the TLS certificate of an https address")
    tls_ca: str | None = setting(
        default=None, help="CA file (PEM) Consul's certificate is signed by; none: the system's"
    )
    tls_cert: str | None = setting(
        default=None, help="client certificate file (PEM), for Consul's https verify_incoming"
    )
    tls_key: str | None = setting(
        default=None, help="the client certificate's private key file (PEM, mode 0600)"
    )

    def __attrs_post_init__(self) -> None:
        if problems := _lease_problems(self):
            raise InvalidConfig("the consul lease store settings are not valid", problems)


CONSUL_LEASES = LeaseStoreInfo(
    name="consul",
    description="Leases as Consul KV entries, written by transactions on their ModifyIndex.",
    factory="pando_runtime_consul._leases:consul_lease_store",
    config_class=ConsulLeaseConfig,
    api_version="1.7",
    reads="every list is ?consistent (the leader confirms it still leads before answering)",
    distribution="pando-runtime-consul",
)
