"""The fleet adapter's info and settings, light enough to list without importing it."""

from __future__ import annotations

from typing import Any

import attrs

from .._adapter._info import AdapterInfo
from .._contract._version import API_VERSION
from .._input._config import setting
from .._lease_stores import LeaseStoreSetting

__all__ = ["FLEET", "FLEET_DESCRIPTION", "FleetConfig", "MemberConfig"]

FLEET_DESCRIPTION = (
    "Runs each app on one of several member adapters (Docker engines, Kubernetes clusters, "
    "any plugin), placed by room once and found there again."
)


@attrs.frozen(kw_only=True)
class MemberConfig:
    """One member of a fleet: an adapter loaded by name, with its own settings."""

    adapter: str = setting(help="The member's adapter, by its registered name ('docker'...).")
    settings: dict[str, Any] = setting(
        factory=dict, help="The member adapter's own settings, as it takes them alone."
    )
    place_new_apps: bool = setting(
        default=True,
        help="Whether new apps may be placed here; false: the apps it has stay and are served, "
        "no new one comes (a member being drained or kept for the edge).",
    )


@attrs.frozen(kw_only=True)
class FleetConfig:
    """Settings of the fleet adapter."""

    members: dict[str, MemberConfig] = setting(
        help="The members by name (a DNS label): each an adapter and its settings."
    )
    control: str | None = setting(
        default=None,
        help="The member that runs the edge (and the trial runs it can run) and answers for "
        "images; unset: the first member.",
    )
    answer_deadline: float = setting(
        default=10.0,
        exclusive_minimum=0,
        maximum=3600,
        help="Seconds a member has to answer a question of the fleet (whether it holds an "
        "app, its room, its capabilities, its capacity or use): one that has not answered by "
        "then counts as silent for that decision (a new app goes to another member; an app "
        "found nowhere else is refused).",
    )
    events_retry: tuple[float, ...] = setting(
        default=(0.5, 1.0, 2.0, 5.0, 10.0),
        help="Seconds between attempts to reopen a silent member's event stream, the last "
        "repeated.",
    )
    members_file: str | None = setting(
        default=None,
        help="A YAML or JSON file of more members ('members: {name: {adapter, settings, "
        "place_new_apps}}'), read once the fleet is entered and again whenever it changes: "
        "members added join, changed ones are replaced, removed ones leave.",
    )
    members_file_poll: float = setting(
        default=2.0,
        exclusive_minimum=0,
        help="Seconds between checks of the members file's content (its SHA-256).",
    )
    join_wait: float = setting(
        default=30.0,
        exclusive_minimum=0,
        help="Seconds a member that joins (or a member's new definition) has to start before "
        "it counts as silent (joined) or is dropped (a replacement: the old one serves on).",
    )

    lease_store: LeaseStoreSetting | None = setting(
        default=None,
        help="A lease store for several host replicas of the fleet ({kind: 'postgres' | "
        "'etcd' | 'consul' | a plugin, settings: the store's own}): the fleet then offers "
        "membership over it, one for every member. Unset: no membership.",
    )


FLEET = AdapterInfo(
    name="fleet",
    description=FLEET_DESCRIPTION,
    factory="pando_runtime.fleet._adapter:FleetAdapter",
    api_version=API_VERSION,
    config_class=FleetConfig,
    distribution="pando-runtime",
)
