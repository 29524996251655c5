"""What the etcd lease store says about itself, and its settings (attrs only: light)."""

from __future__ import annotations

from urllib.parse import urlsplit

import attrs

from pando_runtime import InvalidConfig, Problem
from pando_runtime.plugin import LeaseStoreInfo, https_context, setting

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
    if (config.username is None) != (config.password is None):
        given = "username" if config.username is not None else "password"
        problems.append(Problem(given, "a username and its password go together: give both"))
    problems += https_context(config)[1]
    return problems


@attrs.frozen(kw_only=True)
class EtcdLeaseConfig:
    """Settings of the etcd lease store.

    Checked on creation: an address that is no http(s) URL, a prefix not ending in ``/``, a
    username without its password (or the other way round), TLS files on an http address, or
    TLS files that cannot be read or do not go together raise
    :class:`~pando_runtime.InvalidConfig` naming each.

    Over ``https`` the server is verified against ``tls_ca`` (else the system's CAs); with
    etcd's ``--client-cert-auth``, ``tls_cert`` and ``tls_key`` are the client's certificate.
    With etcd's authentication on, ``username`` and ``password`` get a token
    (``/v3/auth/authenticate``), sent with every call and asked again when etcd drops it.
    """

    address: str = setting(
        default="http://127.0.0.1:2379", help="an etcd client URL (its HTTP/JSON gateway)"
    )
    prefix: str = setting(default="pando/leases/", help="the keys' prefix, ending in '/'")
    timeout: float = setting(
        default=10.0, exclusive_minimum=0, maximum=3600, help="seconds per HTTP call"
    )
    verify: bool = setting(default=True, help="verify the TLS certificate of an https address")
    tls_ca: str | None = setting(
        default=None, help="CA file (PEM) etcd's certificate is signed by; none: the system's"
    )
    tls_cert: str | None = setting(
        default=None, help="client certificate file (PEM), for etcd's --client-cert-auth"
    )
    tls_key: str | None = setting(
        default=None, help="the client certificate's private key file (PEM, mode 0600)"
    )
    username: str | None = setting(
        default=None, help="etcd user, when etcd's authentication is on; none: no user"
    )
    password: str | None = setting(default=None, secret=True, help="the etcd user's password")

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
