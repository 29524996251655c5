"""What the Consul backend says about itself, and its settings (attrs only: light)."""

from __future__ import annotations

from urllib.parse import urlsplit

import attrs

from pando_runtime import InvalidConfig, Problem
from pando_runtime.catalog import CatalogInfo
from pando_runtime.plugin import setting

__all__ = ["CONSUL", "SOCKET_TIMEOUT_MAX", "ConsulConfig"]


SOCKET_TIMEOUT_MAX = 86_400
"""The most seconds an HTTP call may take (a day); the operating system refuses socket
timeouts not far above."""


def _problems(config: ConsulConfig) -> list[Problem]:
    problems = []
    parts = urlsplit(config.address)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(
            Problem("address", f"{config.address!r} is not an http(s)://host:port URL", "invalid")
        )
    elif parts.path not in ("", "/") or parts.query:
        problems.append(Problem("address", "must not have a path or query", "invalid"))
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
