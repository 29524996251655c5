"""The multi-cluster adapter's members: their settings, checked before any I/O, and making them.

Every member cluster is configured from the shared ``settings`` and its entry in ``clusters``;
a bad setting is located where it was given (``settings.<key>`` or ``clusters['<name>'].<key>``).
The clusters come from the kubeconfig files; the default cluster and the membership's cluster
must be among them. :class:`ClusterMembers` makes them, as the members of the core's fleet
(``pando_runtime.fleet``): a :class:`KubernetesAdapter` per cluster, over a named cluster
session of its own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread
import attrs
from anyio.abc import TaskStatus

from pando_runtime import (
    AdapterUnavailable,
    InvalidConfig,
    NotFound,
    Problem,
    RuntimeCapabilities,
    structure_config,
)
from pando_runtime.fleet import FleetMembers, MemberChanges
from pando_runtime.plugin import NO_API_OBSERVER, ApiObserver, MembershipSlot

from ._adapter import KubernetesAdapter
from ._info import KubernetesConfig, MultiClusterConfig
from ._log import logger
from ._remote_secrets import RemoteSecrets
from .api._clusters import ApiRate, Cluster, ClusterSet
from .manifests._network import AppNetwork
from .session._connect import transport_to
from .session._session import ClusterSession

__all__ = [
    "NOUN",
    "ClusterMembers",
    "Loaded",
    "check_members",
    "common_capabilities",
    "load_members",
    "member_config",
]

log = logger("multi")

PER_MEMBER = ("kubeconfig", "context")
"""Settings the multi-cluster adapter sets for each member itself."""

NOUN = "cluster"
"""What a member is called in messages and in errors' ``details``."""


def common_capabilities(members: Sequence[RuntimeCapabilities]) -> RuntimeCapabilities:
    """What every member supports: a flag only when all have it, the lowest isolation."""
    first = members[0]
    values: dict[str, Any] = {}
    for field in attrs.fields(RuntimeCapabilities):
        each = [getattr(m, field.name) for m in members]
        if isinstance(each[0], bool):
            values[field.name] = all(each)
        elif field.name == "isolation_class":
            values[field.name] = min(each)
        elif field.name == "image_delivery":
            values[field.name] = tuple(d for d in each[0] if all(d in e for e in each))
        elif all(e == each[0] for e in each):
            values[field.name] = each[0]
        else:
            values[field.name] = getattr(RuntimeCapabilities(), field.name)
    return attrs.evolve(first, **values)


def _located(error: InvalidConfig, name: str | None, override: Mapping[str, Any]) -> InvalidConfig:
    """``error`` with each problem's path where its setting was given in the adapter's config."""

    def where(path: str) -> str:
        key = re.split(r"[.\[]", path, maxsplit=1)[0]
        if key in PER_MEMBER:
            return path  # the adapter's own top-level setting
        base = f"clusters[{name!r}]" if key in override else "settings"
        return f"{base}.{path}" if path else base

    problems = [attrs.evolve(p, path=where(p.path)) for p in error.problems]
    return InvalidConfig("the member settings are not valid", problems, remedy=error.remedy)


def member_config(c: MultiClusterConfig, name: str | None) -> KubernetesConfig:
    """The settings of member ``name`` (``None``: ``settings`` alone).

    Raises:
        InvalidConfig: each problem located where it was given, as ``settings.<key>`` or
            ``clusters['<name>'].<key>``.
    """
    override = c.clusters.get(name, {}) if name is not None else {}
    values = {**c.settings, **override, "kubeconfig": c.kubeconfig, "context": name}
    try:
        config: KubernetesConfig = structure_config(
            KubernetesConfig, values, what="member settings"
        )
        AppNetwork(config)  # the network settings are checked here too, before any I/O
    except InvalidConfig as error:
        raise _located(error, name, override) from None
    return config


def _named_problems(c: MultiClusterConfig) -> list[Problem]:
    """A cluster named in a setting that ``contexts`` (when given) leaves out."""
    if c.contexts is None:
        return []
    problems = []
    for key in ("default_cluster", "membership_cluster"):
        name = getattr(c, key)
        if name is not None and name not in c.contexts:
            problems.append(
                Problem(key, f"{name!r} is not one of contexts: {', '.join(c.contexts)}", "unknown")
            )
    return problems


def check_members(c: MultiClusterConfig) -> None:
    """Refuse bad member settings now, before any I/O, every problem at once.

    Settings the adapter sets per member, clusters named outside ``contexts``, those of
    ``settings`` alone, then of each cluster named (in ``contexts`` or ``clusters``).
    """
    problems = [
        Problem(
            f"settings.{key}", "is set by the multi-cluster adapter for each cluster", "conflict"
        )
        for key in PER_MEMBER
        if key in c.settings
    ]
    if problems:
        raise InvalidConfig(
            "the member settings are not valid",
            problems,
            remedy="Use the top-level 'kubeconfig' and 'contexts'.",
        )
    if problems := _named_problems(c):
        raise InvalidConfig(
            "a cluster named in the settings is not one of 'contexts'",
            problems,
            remedy="Name one of 'contexts', or leave the setting unset.",
        )
    names = [None, *dict.fromkeys([*(c.contexts or ()), *c.clusters])]
    remedies: list[str] = []
    for name in names:
        try:
            member_config(c, name)
        except InvalidConfig as error:
            problems += [p for p in error.problems if p not in problems]
            remedies += [error.remedy] if error.remedy not in remedies else []
    if problems:
        raise InvalidConfig(
            "the member settings are not valid", problems, remedy=" ".join(remedies)
        )


def _no_cluster(found: ClusterSet, kubeconfig: str | None) -> AdapterUnavailable:
    """No member could be loaded: every file's and context's problem, the first named."""
    problems = [str(p) for p in found.problems]
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        why = f": {problems[0]}{more}"
    elif found.files:
        why = f": the kubeconfig files define no context ({', '.join(found.files)})"
    else:
        why = ": no kubeconfig found and not running in a cluster"
    setting = "'kubeconfig'" if kubeconfig else "$KUBECONFIG (or ~/.kube/config)"
    return AdapterUnavailable(
        f"no cluster to run apps on{why}",
        remedy=f"Fix each problem listed in details['problems'], or point {setting} at "
        "kubeconfig files whose contexts load (several: separated as in $KUBECONFIG); "
        "'contexts' names the ones to use.",
        details={"problems": problems, "files": list(found.files), "kubeconfig": kubeconfig},
    )


@attrs.frozen
class Loaded:
    """The member clusters by name, the default's name and the membership cluster's."""

    clusters: dict[str, Cluster]
    default: str
    membership: str


def load_members(c: MultiClusterConfig) -> Loaded:
    """The member clusters (reads kubeconfig files: blocking).

    Every context when ``contexts`` is unset (one that cannot be loaded is logged and left
    out, the others stay); each named one otherwise (one that cannot be loaded is an error).
    """
    found = ClusterSet.load(c.kubeconfig, contexts=c.contexts)
    if c.contexts is None:
        for problem in found.problems:
            log.warning("cluster left out: %s", problem)
        names = list(found.names())
    else:
        names = list(dict.fromkeys(c.contexts))
    try:
        members = {name: found.cluster(name) for name in names}
    except NotFound as error:
        raise InvalidConfig(f"contexts: {error.message}", remedy=error.remedy) from error
    if not members:
        raise _no_cluster(found, c.kubeconfig)
    default = c.default_cluster or (
        found.default_name if found.default_name in members else names[0]
    )
    if default not in members:
        raise InvalidConfig(
            f"default_cluster {default!r} is not one of the clusters: {', '.join(names)}",
            remedy="Name one of 'contexts' (or of the kubeconfig's contexts).",
        )
    membership = c.membership_cluster or default
    if membership not in members:
        raise InvalidConfig(
            "membership_cluster is not one of the clusters",
            [Problem("membership_cluster", f"{membership!r}: not one of {', '.join(names)}")],
            remedy="Name one of 'contexts' (or of the kubeconfig's contexts), or leave it unset "
            "(the default cluster).",
        )
    return Loaded(members, default, membership)


class ClusterMembers:
    """The member clusters, made on first use: the multi-cluster fleet's member source.

    One :class:`KubernetesAdapter` per cluster of the kubeconfig files, the default first, each
    over a :class:`ClusterSession` named after its cluster, with the API rate of its settings.
    Every member shares one membership slot: the one membership (its Leases on the membership
    cluster) guards every member's writes. Until :meth:`open`, :attr:`adapters` is empty.
    """

    def __init__(self, config: MultiClusterConfig) -> None:
        self.config = config
        self.slot = MembershipSlot()
        self.adapters: dict[str, KubernetesAdapter] = {}
        self.default = ""
        self.membership = ""
        self._observer: ApiObserver = NO_API_OBSERVER
        self._configured: set[str] = set()
        self.join_wait = config.join_wait
        """Seconds the first remote secrets' clusters (and their list) may take to start."""

    async def open(self) -> FleetMembers:
        """Load the clusters (reads kubeconfig files) and make a member of each."""
        loaded = await anyio.to_thread.run_sync(load_members, self.config)
        default, clusters = loaded.default, loaded.clusters
        names = (default, *(n for n in clusters if n != default))
        self.adapters = {name: self._member(name, clusters[name]) for name in names}
        self._configured = set(self.adapters)
        self.default, self.membership = default, loaded.membership
        return FleetMembers(adapters=self.adapters, control=default, default=default)

    @property
    def configured(self) -> frozenset[str]:
        """The clusters of the kubeconfig files (those from remote secrets come and go)."""
        return frozenset(self._configured)

    async def follow(
        self, changes: MemberChanges, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Clusters from remote secrets, while the fleet runs (``remote_secrets_namespace``)."""
        namespace = self.config.remote_secrets_namespace
        if namespace is None:
            task_status.started()
            return
        secrets = RemoteSecrets(self, changes, namespace)
        await secrets.run(wait=self.join_wait, task_status=task_status)

    def made_from(self, name: str, cluster: Cluster) -> KubernetesAdapter:
        """A member for cluster ``name`` from a remote secret (its settings as any member's)."""
        return self._member(name, cluster)

    def now(self, name: str, adapter: object) -> None:
        """Cluster ``name``'s member from a remote secret is ``adapter`` now (``None``: gone)."""
        if isinstance(adapter, KubernetesAdapter):
            self.adapters[name] = adapter
        else:
            self.adapters.pop(name, None)

    def _member(self, name: str, cluster: Cluster) -> KubernetesAdapter:
        config = member_config(self.config, name)
        rated = cluster.with_rate(ApiRate(qps=config.api_qps, burst=config.api_burst))
        connect = functools.partial(transport_to, rated, config)
        session = ClusterSession(config, name=name, connect=connect)
        member = KubernetesAdapter(config, session=session, membership_slot=self.slot)
        member.observe_api(self._observer)
        return member

    def observe_api(self, observer: ApiObserver) -> None:
        """Report every member's API calls, cache and watches (those made later too)."""
        self._observer = observer
        for member in self.adapters.values():
            member.observe_api(observer)
