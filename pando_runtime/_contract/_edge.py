"""The edge: the ingress in front of every app, run by the runtime."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .._util._frozen import frozen_mapping, frozen_tuple
from ._plans import PortProtocol

__all__ = ["EdgeCertificate", "EdgeMount", "EdgePlan", "EdgePort", "EdgeState"]


@attrs.frozen(kw_only=True)
class EdgePort:
    """A port the edge publishes (``published``) and where it listens inside (``target``)."""

    published: int
    target: int
    protocol: PortProtocol = PortProtocol.TCP


@attrs.frozen(kw_only=True)
class EdgeMount:
    """A volume (``volume_id``) mounted into the edge at ``path``."""

    path: str
    volume_id: str
    read_only: bool = False


@attrs.frozen(kw_only=True)
class EdgeCertificate:
    """A TLS certificate the edge serves, as PEM."""

    name: str
    cert_pem: str
    key_pem: str = attrs.field(repr=False)


@attrs.frozen(kw_only=True)
class EdgePlan:
    """An edge (for instance a reverse proxy) that sends traffic to the host's proxy."""

    name: str
    image: str
    args: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    env: Mapping[str, str] = attrs.field(
        factory=dict, converter=frozen_mapping, repr=lambda e: f"<{len(e)} variables>"
    )
    ports: tuple[EdgePort, ...] = attrs.field(default=(), converter=frozen_tuple)
    mounts: tuple[EdgeMount, ...] = attrs.field(default=(), converter=frozen_tuple)
    certificates: tuple[EdgeCertificate, ...] = attrs.field(default=(), converter=frozen_tuple)
    replicas: int = 2


@attrs.frozen(kw_only=True)
class EdgeState:
    """Whether the edge is there and serving; ``detail`` says why not, in plain words."""

    name: str
    present: bool
    running: bool
    detail: str = ""
