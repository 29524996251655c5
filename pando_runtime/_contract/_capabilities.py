"""What an adapter can do, as data a host reads at plan time.

A host never probes an adapter with ``hasattr``: it reads
``await adapter.capabilities()`` and plans around it. An adapter asked for a
capability it lacks raises :class:`CapabilityUnsupported` naming it.
"""

from __future__ import annotations

import enum
from typing import Literal

import attrs

from .._util._frozen import frozen_tuple
from ._errors import CapabilityUnsupported

__all__ = [
    "Capability",
    "ImageDelivery",
    "IsolationClass",
    "LogRetention",
    "RuntimeCapabilities",
    "runtime_sandbox",
]


class IsolationClass(enum.IntEnum):
    """How strongly one bundle is kept apart from others; ordered, weakest first.

    ``PROCESS`` is no isolation beyond the operating system's process model.
    """

    PROCESS = 0
    CONTAINER = 10
    SANDBOXED = 20
    VM = 30
    DEDICATED_HOST = 40


def runtime_sandbox(name: str | None) -> Literal["gvisor", "kata"] | None:
    """The sandbox an app gets from the runtime of this name: ``"gvisor"``, ``"kata"`` or None.

    One rule for every adapter, read from the name alone: a Docker OCI runtime (``runsc``,
    ``runsc-kvm``, ``kata-fc``), a Kubernetes RuntimeClass handler (``gvisor``, ``kata-qemu``) or
    a containerd shim (``io.containerd.runsc.v1``, ``io.containerd.kata-qemu.v2``); case is
    ignored. gVisor is ``runsc``, ``runsc-*`` or ``gvisor*``; Kata is ``kata*``. An app run under
    such a runtime is :attr:`IsolationClass.SANDBOXED`; under any other (``None``: the
    default), a container.
    """
    base = (name or "").lower()
    if base.startswith("io.containerd."):  # a shim: io.containerd.<runtime>.<version>
        base = base.removeprefix("io.containerd.").rpartition(".")[0]
    if base == "runsc" or base.startswith(("runsc-", "gvisor")):
        return "gvisor"
    if base.startswith("kata"):
        return "kata"
    return None


class ImageDelivery(enum.StrEnum):
    """How images reach the runtime."""

    IMPORT = "import"
    REGISTRY = "registry"


class Capability(enum.StrEnum):
    """The name of each capability a method or a plan can need."""

    PERSISTENT_VOLUMES = "persistent_volumes"
    EXEC = "exec"
    MULTIPLE_WORKLOADS = "multiple_workloads"
    CARRIED_FILES = "carried_files"
    PRIVATE_NETWORK = "private_network"
    RESOURCE_LIMITS = "resource_limits"
    REPORTS_USAGE = "reports_usage"
    BUNDLE_EVENTS = "bundle_events"
    EDGE = "edge"
    EGRESS_RESTRICTION = "egress_restriction"
    EGRESS_HOST_NAMES = "egress_host_names"
    TRIAL_RUN = "trial_run"
    PORT_OBSERVATION = "port_observation"
    WRITE_OBSERVATION = "write_observation"
    IMAGE_IMPORT = "image_import"
    LOG_SIZE_CAP = "log_size_cap"
    MEMBERSHIP = "membership"
    GRANTABLE_CAPABILITIES = "grantable_capabilities"
    ISOLATION_CLASS = "isolation_class"
    CONFIRMED_OBSERVE = "confirmed_observe"
    STOPPING_OBSERVED = "stopping_observed"


@attrs.frozen(kw_only=True)
class LogRetention:
    """How the runtime keeps workload logs."""

    supports_size_cap: bool = False
    can_change_without_recreate: bool = False
    reports_usage: bool = False
    min_bytes: int = 0


@attrs.frozen(kw_only=True)
class RuntimeCapabilities:
    """Everything a host may ask of this adapter.

    ``egress_restriction``: a plan's ``network.egress`` is enforced (its CIDR rules);
    ``egress_host_names``: its host-name rules are enforced too.
    ``membership``: several host replicas can share the bundles (``adapter.membership``).
    ``default_capabilities``: the Linux capabilities every workload runs with (``None``: the
    runtime does not say); ``grantable_capabilities``: those a workload's
    ``privileges.capabilities`` may name (the defaults included; empty: none is granted).
    ``max_workloads_per_bundle`` of 0 means no limit; ``platform`` such as
    ``linux/amd64``, or ``None`` when unknown.

    Two guarantees every adapter written for the API that brought them gives, so true by
    default (API 1.7); false only for an adapter written before, as the core's version-aware
    wrapper says for it: ``confirmed_observe``, ``observe(ref, not_before=...)`` answers with
    state confirmed since (API 1.1); ``stopping_observed``, an instance still ending is
    observed ``stopping``, so ``exists=False`` or a workload not running means nothing of it
    runs any more (API 1.3).
    """

    isolation_class: IsolationClass = IsolationClass.CONTAINER
    persistent_volumes: bool = False
    exec: bool = False
    multiple_workloads: bool = True
    carried_files: bool = False
    private_network: bool = False
    resource_limits: bool = False
    reports_usage: bool = False
    bundle_events: bool = False
    edge: bool = False
    egress_restriction: bool = False
    egress_host_names: bool = False
    trial_run: bool = False
    port_observation: bool = False
    write_observation: bool = False
    membership: bool = False
    image_delivery: tuple[ImageDelivery, ...] = attrs.field(
        default=(ImageDelivery.REGISTRY,), converter=frozen_tuple
    )
    max_workloads_per_bundle: int = 0
    platform: str | None = None
    log_retention: LogRetention = attrs.field(factory=LogRetention)
    default_capabilities: tuple[str, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(frozen_tuple)
    )
    grantable_capabilities: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    confirmed_observe: bool = True
    stopping_observed: bool = True

    def supports(self, capability: Capability | str) -> bool:
        """Whether the adapter has ``capability``."""
        capability = Capability(capability)
        if capability is Capability.IMAGE_IMPORT:
            return ImageDelivery.IMPORT in self.image_delivery
        if capability is Capability.LOG_SIZE_CAP:
            return self.log_retention.supports_size_cap
        if capability is Capability.GRANTABLE_CAPABILITIES:
            return bool(self.grantable_capabilities)
        if capability is Capability.ISOLATION_CLASS:  # a level: any isolation at all
            return self.isolation_class > IsolationClass.PROCESS
        value: bool = getattr(self, capability.value)
        return value

    def require(self, capability: Capability | str) -> None:
        """Raise :class:`CapabilityUnsupported` unless the adapter has ``capability``."""
        if not self.supports(capability):
            raise CapabilityUnsupported(str(Capability(capability)))

    @property
    def supported(self) -> frozenset[Capability]:
        """Every capability the adapter has."""
        return frozenset(c for c in Capability if self.supports(c))
