"""What the etcd lease store says about itself, and its settings (attrs only: light)."""

from __future__ import annotations

from urllib.parse import urlsplit

import attrs

from pando_runtime import InvalidConfig, Problem
from pando_runtime.plugin import LeaseStoreInfo, setting

__all__ = ["ETCD", "EtcdLeaseConfig"]


def _problems(config: EtcdLeaseConfig) -> list[Problem]:
    problems = []
    parts = urlsplit(config.address)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(
            Problem("address", f"{config.address!r} is not an http(s)://host:port URL", "invalid")
        )
    if not config.prefix.endswith("/"):
        problems.append(Problem("prefix", "must end with '/'", "invalid"))
    return problems


@attrs.frozen(kw_only=True)
class EtcdLeaseConfig:
    """Settings of the etcd lease store.

    Checked on creation: an address that is no http(s) URL or a prefix not ending in ``/``
    raises :class:`~pando_runtime.InvalidConfig` naming it.
    """

    address: str = setting(
        default="http://127.0.0.1:2379", help="an etcd client URL (its HTTP/JSON gateway)"
    )
    prefix: str = setting(default="pando/leases/", help="the keys' prefix, ending in '/'")
    timeout: float = setting(
        default=10.0, exclusive_minimum=0, maximum=3600, help="seconds per HTTP call"
    )
    verify: bool = setting(default=True, help="verify the TLS certificate of an https address")

    def __attrs_post_init__(self) -> None:
        if problems := _problems(self):
            raise InvalidConfig("the etcd lease store settings are not valid", problems)


ETCD = LeaseStoreInfo(
    name="etcd",
    description="Leases as etcd v3 keys, written by transactions on their mod_revision.",
    factory="pando_runtime_etcd._store:etcd_lease_store",
    config_class=EtcdLeaseConfig,
    api_version="1.7",
    reads="ranges are linearizable (etcd's default; never 'serializable'), served by the leader",
    distribution="pando-runtime-etcd",
)
