"""What a host asks a runtime to run: bundle plans and the parts they are made of.

A *bundle* is one app's set of workloads, with the volumes they mount and the
network rules around them. Plans are plain data: frozen, slotted attrs classes
whose sequences are tuples and whose mappings are read-only, so a plan can be
handed to any task without copying.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping

import attrs

from .._util._frozen import frozen_mapping, frozen_tuple
from ._capabilities import IsolationClass
from ._privileges import Privileges

__all__ = [
    "BundlePlan",
    "CarriedFile",
    "EgressPolicy",
    "EgressRule",
    "HealthCheck",
    "Mount",
    "NetworkPlan",
    "Port",
    "PortProtocol",
    "RegistryAuth",
    "Resources",
    "VolumePlan",
    "WorkloadPlan",
]


class PortProtocol(enum.StrEnum):
    """Transport protocol of a port."""

    TCP = "tcp"
    UDP = "udp"


@attrs.frozen
class Port:
    """A port a workload listens on."""

    number: int
    protocol: PortProtocol = PortProtocol.TCP


@attrs.frozen
class Mount:
    """A volume of the bundle mounted into a workload at an absolute ``path``."""

    volume_id: str
    path: str
    read_only: bool = False


@attrs.frozen
class CarriedFile:
    """A small file placed into the workload's file system before it starts."""

    path: str
    content: bytes = attrs.field(repr=lambda c: f"<{len(c)} bytes>")
    mode: int = 0o644


@attrs.frozen(kw_only=True)
class HealthCheck:
    """How the runtime judges a running workload healthy.

    Exactly one of ``command`` (run inside the workload, exit 0 is healthy) or
    ``http_path`` (a GET on ``port`` answering 2xx or 3xx) is set. A runtime
    only *reports* health; it never restarts an unhealthy workload.
    """

    command: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    http_path: str | None = None
    port: int | None = None
    interval_seconds: float = 10.0
    timeout_seconds: float = 5.0
    retries: int = 3


@attrs.frozen(kw_only=True)
class Resources:
    """What a workload may use; ``None`` leaves a dimension unlimited."""

    cpu_millis: int | None = None
    memory_bytes: int | None = None


@attrs.frozen(kw_only=True)
class RegistryAuth:
    """Credentials to pull a workload's image; never stored by an adapter beyond its use."""

    registry: str
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    identity_token: str | None = attrs.field(default=None, repr=False)


@attrs.frozen(kw_only=True)
class WorkloadPlan:
    """One workload of a bundle: an image run with a command, env, files and mounts.

    ``env`` holds fully resolved values, secrets included: an adapter never
    reports them back (observed state has no environment). ``privileges``: what the
    workload needs beyond the runtime's hardened defaults (named Linux capabilities).
    """

    name: str
    image: str
    command: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    entrypoint: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    working_dir: str | None = None
    env: Mapping[str, str] = attrs.field(
        factory=dict, converter=frozen_mapping, repr=lambda e: f"<{len(e)} variables>"
    )
    pull_auth: RegistryAuth | None = None
    mounts: tuple[Mount, ...] = attrs.field(default=(), converter=frozen_tuple)
    files: tuple[CarriedFile, ...] = attrs.field(default=(), converter=frozen_tuple)
    ports: tuple[Port, ...] = attrs.field(default=(), converter=frozen_tuple)
    depends_on: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    health: HealthCheck | None = None
    resources: Resources = attrs.field(factory=Resources)
    log_bytes: int | None = None
    exposed: bool = False
    privileges: Privileges = attrs.field(factory=Privileges)


@attrs.frozen(kw_only=True)
class VolumePlan:
    """A persistent volume the bundle's workloads mount; it outlives the bundle."""

    volume_id: str
    name: str
    size_bytes: int | None = None


@attrs.frozen(kw_only=True)
class EgressRule:
    """An allowed outbound destination: a CIDR block or a host name, and ports.

    A CIDR block (``203.0.113.0/24``, ``2001:db8::/32``) allows TCP and UDP to
    its addresses; a host name (``api.example.com``) allows TCP connections to
    that name only, which a runtime enforces through a forward proxy. Empty
    ``ports`` allow every port.
    """

    destination: str
    ports: tuple[int, ...] = attrs.field(default=(), converter=frozen_tuple)

    @property
    def is_cidr(self) -> bool:
        """Whether ``destination`` is a CIDR block (else it names a host)."""
        try:
            ipaddress.ip_network(self.destination, strict=False)
        except ValueError:
            return False
        return True


@attrs.frozen(kw_only=True)
class EgressPolicy:
    """Outbound traffic is restricted to ``allow``; an empty ``allow`` denies all."""

    allow: tuple[EgressRule, ...] = attrs.field(default=(), converter=frozen_tuple)

    def allows(self, destination: str, port: int) -> bool:
        """Whether a connection to ``destination`` (an address or host name) on ``port`` is allowed.

        An address matches the CIDR rules that contain it; a host name matches the
        rules naming it (case aside). A rule without ports allows every port.
        """
        try:
            address = ipaddress.ip_address(destination)
        except ValueError:
            address = None
        for rule in self.allow:
            if rule.ports and port not in rule.ports:
                continue
            if address is None:
                if not rule.is_cidr and rule.destination.lower() == destination.lower():
                    return True
            elif rule.is_cidr and address in ipaddress.ip_network(rule.destination, strict=False):
                return True
        return False


@attrs.frozen(kw_only=True)
class NetworkPlan:
    """The bundle's network: always private; egress unrestricted unless ``egress`` is set."""

    private: bool = True
    egress: EgressPolicy | None = None

    @property
    def egress_restricted(self) -> bool:
        """Whether outbound traffic is limited to ``egress.allow``."""
        return self.egress is not None


@attrs.frozen(kw_only=True)
class BundlePlan:
    """Everything one app needs, applied as a unit.

    ``bundle_id`` is stable for the app's whole life. ``first_deploy`` tells a
    runtime that spans places that nothing of this app is running yet, so it
    may choose where to put it; ``False`` is always safe. ``isolation`` is the weakest
    isolation class the app may run under (API 1.5): a runtime whose ``isolation_class`` is
    lower refuses the plan before writing anything, and one that offers several classes runs
    the app under one at least this strong. The default, ``PROCESS``, takes any.
    """

    bundle_id: str
    workloads: tuple[WorkloadPlan, ...] = attrs.field(converter=frozen_tuple)
    volumes: tuple[VolumePlan, ...] = attrs.field(default=(), converter=frozen_tuple)
    network: NetworkPlan = attrs.field(factory=NetworkPlan)
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=frozen_mapping)
    first_deploy: bool = False
    isolation: IsolationClass = IsolationClass.PROCESS

    def workload(self, name: str) -> WorkloadPlan:
        """The workload called ``name``; ``KeyError`` when the plan has none."""
        for workload in self.workloads:
            if workload.name == name:
                return workload
        raise KeyError(name)

    def start_order(self) -> tuple[WorkloadPlan, ...]:
        """Workloads in an order where each comes after everything it depends on.

        Ties keep the plan's order. Assumes a validated plan (no cycles).
        """
        by_name = {w.name: w for w in self.workloads}
        ordered: list[WorkloadPlan] = []
        seen: set[str] = set()

        def visit(workload: WorkloadPlan) -> None:
            if workload.name in seen:
                return
            seen.add(workload.name)
            for dependency in workload.depends_on:
                if dependency in by_name:
                    visit(by_name[dependency])
            ordered.append(workload)

        for workload in self.workloads:
            visit(workload)
        return tuple(ordered)
