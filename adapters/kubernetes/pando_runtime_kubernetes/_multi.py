"""The multi-cluster adapter: the core's fleet (``pando_runtime.fleet``) over Kubernetes clusters.

Where each app lives and where a new one goes is the fleet's (``docs/fleet.md``): an app lives
on exactly one member, found from the member's own record (its namespace, ``pando-<bundle
id>``, annotated with the bundle id, in each member's cache), placed by room on its first
deploy, placements in flight counted, and never moved. This adapter wraps a
:class:`FleetAdapter` whose members are :class:`KubernetesAdapter` s made from the kubeconfig
contexts (:class:`ClusterMembers`), and keeps what is Kubernetes' own: the members' settings
checked before any I/O, located where they were given; one membership for every member (its
Leases on ``membership_cluster``, its write guard shared by the members); plans checked by the
default cluster's rules; image import only into a registry every member shares; the members'
API calls, counted and observed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, ClassVar

import attrs
from anyio.abc import ByteReceiveStream

from pando_runtime import (
    AdapterInfo,
    AdapterUnavailable,
    BundleHandle,
    BundlePlan,
    Capability,
    ImageDelivery,
    Membership,
    MembershipSettings,
    RuntimeCapabilities,
    Upstream,
    WorkloadRef,
    check_plan,
    structure_config,
)
from pando_runtime.fleet import FleetAdapter, FleetConfig
from pando_runtime.plugin import ApiObserver, DelegatingAdapter

from ._adapter import KubernetesAdapter
from ._info import MULTI_ADAPTER, MULTI_DESCRIPTION, KubernetesConfig, MultiClusterConfig
from ._members import NOUN, ClusterMembers, check_members, common_capabilities, member_config
from ._names import upstream_for

__all__ = ["MultiClusterAdapter"]


def _checked(config: Mapping[str, Any] | MultiClusterConfig | None) -> MultiClusterConfig:
    """The settings, every member's checked (no I/O; every problem at once)."""
    settings: MultiClusterConfig = structure_config(MultiClusterConfig, config)
    check_members(settings)
    return settings


class MultiClusterAdapter(DelegatingAdapter):
    """Runs each app on one of several Kubernetes clusters, placed by room on its first deploy."""

    kind: ClassVar[str] = "kubernetes-multi"
    api_version: ClassVar[str] = MULTI_ADAPTER.api_version
    description: ClassVar[str] = MULTI_DESCRIPTION
    Config: ClassVar[type[Any]] = MultiClusterConfig
    config: MultiClusterConfig

    def __init__(self, config: Mapping[str, Any] | MultiClusterConfig | None = None) -> None:
        self.clusters = ClusterMembers(_checked(config))
        """The member clusters, made on first use."""
        fleet_config = FleetConfig(members={}, join_wait=self.clusters.config.join_wait)
        self.fleet = FleetAdapter(fleet_config, source=self.clusters, noun=NOUN)
        """The fleet every call about an app goes through."""
        super().__init__(self.fleet)
        self.config = self.clusters.config

    def configure(self, config: Mapping[str, Any] | MultiClusterConfig | None) -> None:
        """Take new settings, checked as at construction; members made already keep theirs."""
        self.config = self.clusters.config = _checked(config)

    @property
    def info(self) -> AdapterInfo:
        """This adapter's info (not the fleet's it wraps)."""
        return self.adapter_info()

    # -- members ------------------------------------------------------------------------------

    def _member_config(self, name: str | None) -> KubernetesConfig:
        """The settings of member ``name`` (``None``: ``settings`` alone), checked."""
        return member_config(self.config, name)

    @property
    def members(self) -> Mapping[str, KubernetesAdapter]:
        """The member clusters by name, the default first (empty until first used)."""
        return dict(self.clusters.adapters)

    @property
    def default_cluster(self) -> str:
        """The default cluster's name (empty until first used)."""
        return self.clusters.default

    @property
    def membership_cluster(self) -> str:
        """The cluster holding the membership's Leases (empty until first used)."""
        return self.clusters.membership

    @property
    def api_calls(self) -> int:
        """API calls made so far, every member's summed."""
        return sum(m.api_calls for m in self.clusters.adapters.values())

    def observe_api(self, observer: ApiObserver) -> None:
        """Report every member's API calls, cache and watches, each naming its cluster."""
        self.clusters.observe_api(observer)

    def health_details(self) -> dict[str, str]:
        """Each member's :meth:`KubernetesAdapter.health_details`, keyed ``<cluster>.<key>``.

        Computed (no I/O), as the single-cluster adapter's: the members made so far, which
        is every member once the adapter is entered or has been used.
        """
        return self.fleet.health_details()

    async def locate(self, bundle_id: str) -> str | None:
        """The cluster holding ``bundle_id``, ``None`` when no member has it.

        A member that cannot be read while no other has the bundle: :class:`AdapterUnavailable`
        naming it (the bundle may be there).
        """
        return await self.fleet.locate(bundle_id)

    @property
    def placements_in_flight(self) -> Mapping[str, str]:
        """The cluster of each new bundle this process placed and still holds room for.

        No call: what each member's cache counts already is dropped first.
        """
        return self.fleet.placements_in_flight

    # -- what the members share ---------------------------------------------------------------

    async def capabilities(self) -> RuntimeCapabilities:
        """What every member supports; image import only when they share one registry.

        Not the fleet's "what some member offers": a plan is checked by the default cluster's
        rules, and goes there when it is not a first deploy, so every member must run it.
        """
        each = await self.fleet.member_set.capabilities()  # a silent member: its last answer
        common = common_capabilities(list(each.values()))
        if not self._one_registry(self.clusters.adapters):
            delivery = tuple(d for d in common.image_delivery if d is not ImageDelivery.IMPORT)
            common = attrs.evolve(common, image_delivery=delivery)
        return common

    @staticmethod
    def _one_registry(members: Mapping[str, KubernetesAdapter]) -> bool:
        """Whether every member has the same image registry settings (an import serves all)."""
        settings = {m.images.settings for m in members.values()}
        return len(settings) == 1

    async def check_plan(self, plan: BundlePlan) -> None:
        """The default member's check, then the capabilities every member shares.

        Members share the plan rules (the same settings but the cluster's address), so a bad
        plan is refused before placement reads any cluster's room.
        """
        await self.fleet.member_set.fleet()
        default = self.clusters.default
        try:  # its rules, which need no answer from its cluster: even one not started yet
            await self.clusters.adapters[default].check_plan(plan)
        except AdapterUnavailable as error:
            raise self.fleet.member_set.named(error, default) from error
        check_plan(plan, await self.capabilities())

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the bundle on its cluster; a new one is placed first (``docs/fleet.md``)."""
        self.clusters.slot.check_write(plan.bundle_id)  # before placement reads or reserves
        await self.check_plan(plan)
        return await self.fleet.apply(plan)

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """The workload's address in its cluster, computed (no I/O, as the contract says).

        Before any member is made: the address the settings give (it has the same form in
        every member; only a member's ``cluster_domain`` may differ).
        """
        if self.fleet.member_set.made is None:
            domain = self._member_config(self.config.default_cluster).cluster_domain
            return upstream_for(ref, port, domain)
        return self.fleet.upstream(ref, port)

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """Into the registry every member shares (gate: ``image_import``)."""
        (await self.capabilities()).require(Capability.IMAGE_IMPORT)
        default = await self.fleet.member_set.member(self.clusters.default)
        return await default.import_image(source)

    # -- membership ---------------------------------------------------------------------------

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """Join the host's replicas: one membership for every cluster.

        Its Leases are on ``membership_cluster`` (the default cluster when unset), in that
        member's ``server_namespace``; it guards every member's writes (``docs/replicas.md``).
        """
        return self._join(replica, settings)

    @contextlib.asynccontextmanager
    async def _join(
        self, replica: str, settings: MembershipSettings | None
    ) -> AsyncIterator[Membership]:
        await self.fleet.member_set.fleet()
        leases = self.clusters.adapters[self.clusters.membership].leases
        bundles = self.fleet.held_bundles  # every member's; a silent one named
        async with self.clusters.slot.join(leases, replica, settings, bundles=bundles) as joined:
            yield joined
