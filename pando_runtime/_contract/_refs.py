"""Names a host uses to point at what it applied: refs, handles and upstreams."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .._util._frozen import frozen_mapping

__all__ = [
    "BundleHandle",
    "BundleRef",
    "DestroyOptions",
    "Upstream",
    "UpstreamDial",
    "WorkloadRef",
]


@attrs.frozen
class BundleRef:
    """Points at one app's bundle by its stable id."""

    bundle_id: str


@attrs.frozen
class WorkloadRef:
    """Points at one workload of a bundle."""

    bundle_id: str
    workload: str

    @property
    def bundle(self) -> BundleRef:
        """The bundle this workload belongs to."""
        return BundleRef(self.bundle_id)


@attrs.frozen(kw_only=True)
class BundleHandle:
    """What ``apply`` returns: the bundle id and an adapter-private handle.

    ``handle`` is opaque to the host; it may store it and hand it back, never parse it.
    """

    bundle_id: str
    handle: str
    details: Mapping[str, str] = attrs.field(factory=dict, converter=frozen_mapping)

    @property
    def ref(self) -> BundleRef:
        """A ref to the applied bundle."""
        return BundleRef(self.bundle_id)


@attrs.frozen(kw_only=True)
class DestroyOptions:
    """How far ``destroy`` goes; volumes are kept unless the host says otherwise."""

    keep_volumes: bool = True


@attrs.frozen(kw_only=True)
class UpstreamDial:
    """How a host reaches an upstream through a relay of the runtime's (API 1.4).

    The host opens TLS (1.3) to ``address`` (``host:port``), verifies the relay's certificate
    against ``ca_pem`` (one or more authorities) for ``server_name``, presents
    ``client_cert_pem`` with ``client_key_pem``, then sends ``first_line`` and a newline. The
    relay answers one line: ``OK``, after which the connection carries the upstream's bytes
    both ways, or anything else (``NO <reason>``), after which it closes.
    :func:`pando_runtime.connect_upstream` does all of it. The key is a secret: it is left
    out of ``repr``, and a host never logs it.
    """

    address: str
    server_name: str
    ca_pem: str
    client_cert_pem: str
    client_key_pem: str = attrs.field(repr=False)
    first_line: str


@attrs.frozen(kw_only=True)
class Upstream:
    """Where the host's proxy sends a workload's traffic; computed, no I/O.

    ``url`` has a scheme, host and port and no path; connections with the same
    ``pool_key`` may share a pool. ``dial`` (API 1.4), when set, says how to reach the
    upstream through the runtime's relay where the URL is not reachable from the host;
    :func:`pando_runtime.connect_upstream` opens a connection either way.
    """

    url: str
    pool_key: str
    dial: UpstreamDial | None = None
