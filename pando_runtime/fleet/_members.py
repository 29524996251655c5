"""A fleet's members: made from its settings, every problem found before any I/O.

Each member is an adapter loaded by name (:func:`~pando_runtime.load_adapter`) with its own
settings; a bad member setting is located where it was given
(``members['host-a'].settings.host``). What a fleet needs of a member beyond the contract is
optional (:class:`BundleRecords`, :class:`RequestsView`, :class:`RuntimeKey`): a member
without it is asked through the contract instead, at a cost the docs state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from .._adapter._abc import RuntimeAdapter
from .._adapter._registry import load_adapter
from .._contract._capabilities import ImageDelivery, RuntimeCapabilities
from .._contract._errors import (
    AdapterNotInstalled,
    AdapterUnavailable,
    IncompatibleAdapter,
    InvalidConfig,
    Problem,
    UnknownAdapter,
)
from .._lease_stores import lease_store_problems
from ._info import FleetConfig
from ._placement import BundleRequests

__all__ = [
    "BundleRecords",
    "ConfiguredMembers",
    "FleetMembers",
    "MemberSource",
    "RequestsView",
    "RuntimeKey",
    "fleet_capabilities",
    "naming",
]

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@runtime_checkable
class BundleRecords(Protocol):
    """A member that says where an app lives from its own records.

    ``holds``: whether the runtime has any record of the bundle (a workload, its network or
    namespace, a volume), an app whose image could not be pulled included; raises
    :class:`AdapterUnavailable` when the runtime cannot be read. ``known_to_hold``: the same
    from what the adapter holds in memory now, no call (``False`` when it does not know).
    ``held_bundles``: every bundle it has a record of. A member without these is asked
    ``observe(...).exists``, and told of as a whole when its events were missed.
    """

    async def holds(self, bundle_id: str) -> bool: ...

    def known_to_hold(self, bundle_id: str) -> bool: ...

    async def held_bundles(self) -> list[str]: ...


@runtime_checkable
class RequestsView(Protocol):
    """A member that says what each of its bundles takes, from its view, no call.

    Placements in flight are held until this view counts them; a member without it has them
    released once its ``apply`` returns (its room counts them from then on).
    """

    def requests_by_bundle(self) -> Mapping[str, BundleRequests]: ...


@runtime_checkable
class RuntimeKey(Protocol):
    """A member that names the runtime it drives and the apps it owns there (no I/O).

    Two members with the same key would hold the same apps: a fleet refuses them.
    ``None``: the adapter cannot tell.
    """

    def runtime_key(self) -> str | None: ...


@attrs.frozen
class FleetMembers:
    """A fleet's members, ready to use.

    ``control``: the member of the edge, trial runs and images. ``default``: where an app found
    nowhere that is not a first deploy goes (``None``: placed by room, as a new app is).
    ``closed``: members no new app goes to.
    """

    adapters: Mapping[str, RuntimeAdapter]
    control: str
    default: str | None = None
    closed: frozenset[str] = frozenset()

    async def open(self) -> FleetMembers:
        """Members made already are their own source: ``FleetAdapter(source=members)``."""
        return self


class MemberSource(Protocol):
    """Where a fleet's members come from: made on first use (it may read files)."""

    async def open(self) -> FleetMembers: ...


def naming(error: AdapterUnavailable, member: str, noun: str = "member") -> AdapterUnavailable:
    """``error``, naming ``member`` (in its message and ``details[noun]``) unless it does."""
    if error.details.get(noun) == member:
        return error
    return AdapterUnavailable(
        f"{noun} {member}: {error.message}",
        remedy=error.remedy,
        details={**error.details, noun: member},
    )


def _relocated(error: InvalidConfig, where: str) -> list[Problem]:
    return [attrs.evolve(p, path=f"{where}.{p.path}" if p.path else where) for p in error.problems]


class ConfiguredMembers:
    """The members a :class:`FleetConfig` names, made at once (no I/O; every problem at once)."""

    def __init__(
        self, config: FleetConfig, *, load: Callable[..., RuntimeAdapter] = load_adapter
    ) -> None:
        problems: list[Problem] = []
        remedies: list[str] = []
        adapters: dict[str, RuntimeAdapter] = {}
        if not config.members:
            problems.append(Problem("members", "a fleet needs at least one member", "missing"))
        for name, member in config.members.items():
            where = f"members[{name!r}]"
            if not _LABEL.match(name):
                problems.append(
                    Problem(where, "a member's name is a DNS label (a-z, 0-9, '-')", "invalid")
                )
            if member.adapter == "fleet":
                problems.append(
                    Problem(f"{where}.adapter", "a fleet is not a member of a fleet", "invalid")
                )
                continue
            try:
                adapters[name] = load(member.adapter, member.settings)
            except InvalidConfig as error:
                problems += _relocated(error, f"{where}.settings")
                remedies.append(error.remedy)
            except (UnknownAdapter, AdapterNotInstalled, IncompatibleAdapter) as error:
                problems.append(Problem(f"{where}.adapter", error.message, "unknown"))
                remedies.append(error.remedy)
        problems += _same_runtime(adapters) + _fleet_problems(config)
        if problems:
            remedies = list(dict.fromkeys(remedies))
            raise InvalidConfig(
                "the fleet's settings are not valid",
                problems,
                remedy=" ".join([*remedies, "Fix each problem at its path."]),
            )
        self.members = FleetMembers(
            adapters=adapters,
            control=config.control or next(iter(adapters)),
            closed=frozenset(n for n, m in config.members.items() if not m.place_new_apps),
        )


def _fleet_problems(config: FleetConfig) -> list[Problem]:
    """What is wrong with the fleet's own settings: its control member, its lease store."""
    problems = []
    if config.control is not None and config.control not in config.members:
        names = ", ".join(config.members) or "none"
        problems.append(Problem("control", f"not a member (members: {names})", "unknown"))
    if not any(m.place_new_apps for m in config.members.values()) and config.members:
        problems.append(Problem("members", "no member takes new apps (place_new_apps)", "invalid"))
    if config.lease_store is not None:
        problems += lease_store_problems(config.lease_store)
    return problems


def _same_runtime(adapters: Mapping[str, RuntimeAdapter]) -> list[Problem]:
    """Two members that drive one runtime as one owner: their apps would be each other's."""
    seen: dict[str, str] = {}
    problems = []
    for name, adapter in adapters.items():
        key = adapter.runtime_key() if isinstance(adapter, RuntimeKey) else None
        if key is None:
            continue
        if key in seen:
            problems.append(
                Problem(
                    f"members[{name!r}].settings",
                    f"drives the same runtime as one owner as members[{seen[key]!r}]: "
                    "each would see the other's apps as its own",
                    "conflict",
                )
            )
        else:
            seen[key] = name
    return problems


# -- capabilities ----------------------------------------------------------------------------

_PLAN_NEEDS = frozenset(
    {
        "isolation_class",
        "max_workloads_per_bundle",
        "grantable_capabilities",
        "persistent_volumes",
        "multiple_workloads",
        "carried_files",
        "private_network",
        "resource_limits",
        "egress_restriction",
        "egress_host_names",
    }
)
"""What a plan asks for: a fleet has it when some member open to new apps has it, and places a
plan that needs it only there."""
_CONTROL = frozenset({"edge"})
"""What the control member does for the whole fleet."""
_TRIALS = frozenset({"port_observation", "write_observation"})
"""What a trial run observes: a fleet has it when every member that runs trials has it (a trial
goes to the control member, or to another that can run what it asks)."""


def _one_of(name: str, offering: list[RuntimeCapabilities]) -> Any:
    """A plan's need, as a fleet has it when some member of ``offering`` has it."""
    if name == "isolation_class":
        return max(m.isolation_class for m in offering)
    if name == "max_workloads_per_bundle":
        limits = [m.max_workloads_per_bundle for m in offering]
        return 0 if 0 in limits else max(limits)
    if name == "grantable_capabilities":
        return tuple(dict.fromkeys(c for m in offering for c in m.grantable_capabilities))
    return any(getattr(m, name) for m in offering)


def _every(name: str, every: list[RuntimeCapabilities]) -> Any:
    """What is asked of a running app, as a fleet has it when every member has it."""
    each = [getattr(m, name) for m in every]
    if isinstance(each[0], bool):
        return all(each)
    if all(e == each[0] for e in each):
        return each[0]
    return getattr(RuntimeCapabilities(), name)


def fleet_capabilities(
    members: Mapping[str, RuntimeCapabilities], control: str, placing: Sequence[str]
) -> RuntimeCapabilities:
    """What a fleet of ``members`` can do (see ``docs/fleet.md``).

    A plan's needs (volumes, carried files, egress rules, limits, isolation, capabilities a
    workload may be granted): what some member of ``placing`` offers, the plan going only to
    members that offer all it needs. The edge: the ``control`` member's. Trial runs: some
    member's (a trial goes to the control member, or to another that can run what it asks),
    observed as every member that runs trials observes. What is
    asked of a running app (exec, usage, events, logs), the platform and the default
    capabilities: what every member has, so a host may rely on it for any app. Images come
    from a registry (an imported image is on one member only); membership is the fleet's own
    (none here).
    """
    every = list(members.values())
    offering = [members[n] for n in placing if n in members] or every
    values: dict[str, Any] = {}
    for field in attrs.fields(RuntimeCapabilities):
        name = field.name
        if name in _PLAN_NEEDS:
            values[name] = _one_of(name, offering)
        elif name in _CONTROL:  # a control member that never answered offers nothing yet
            values[name] = getattr(members[control], name) if control in members else False
        elif name == "trial_run":
            values[name] = any(m.trial_run for m in every)
        elif name in _TRIALS:
            values[name] = all(getattr(m, name) for m in every if m.trial_run)
        else:
            values[name] = _every(name, every)
    values["image_delivery"] = (ImageDelivery.REGISTRY,)
    values["membership"] = False
    return RuntimeCapabilities(**values)
