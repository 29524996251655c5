"""Several host replicas: the settings of a membership, its changes, and their checks.

A host that runs several replicas joins each to a membership
(``adapter.membership(replica="a")``, see :class:`~pando_runtime.Membership`); the
types here are what it passes and receives. The timings are client-go leader
election's, with its relations: a replica stops writing when it could not renew
its lease for ``renew_deadline`` seconds, well before the others may take over
(``lease_duration`` after they last saw it renewed).
"""

from __future__ import annotations

import math
import re

import attrs

from .._contract._errors import InvalidConfig, InvalidInput, Problem

__all__ = [
    "JITTER_FACTOR",
    "MembershipSettings",
    "OwnershipChange",
    "check_membership",
    "check_singleton_name",
    "validate_membership",
]

JITTER_FACTOR = 1.2
"""client-go's: the renew deadline must exceed the retry period times this."""

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_NAME_RULE = "1 to 63 lowercase letters, digits or '-', starting and ending alphanumeric"


@attrs.frozen(kw_only=True)
class MembershipSettings:
    """How a replica holds its lease; client-go leader election's defaults and relations.

    Attributes:
        lease_duration: seconds the others wait, after they last saw a replica's lease
            renewed, before they take its bundles (and a singleton's lease, its singleton).
        renew_deadline: seconds after its last successful renewal a replica stops
            writing (it owns nothing until it renews again); less than ``lease_duration``.
        retry_period: seconds between renewals (and between reads of the others'
            leases); ``renew_deadline`` must exceed it times 1.2 (``JITTER_FACTOR``).
    """

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@attrs.frozen(kw_only=True)
class OwnershipChange:
    """The bundles this replica gained or lost, and the members after the change.

    The first change of a stream holds every bundle the replica owns when it opens
    (in ``gained``). ``gained`` and ``lost`` cover the bundles the runtime holds; for a
    bundle not applied yet, ask ``membership.owner(bundle_id)`` (or compute it from
    ``members`` with :func:`rendezvous_owner`).
    """

    members: frozenset[str]
    gained: frozenset[str] = frozenset()
    lost: frozenset[str] = frozenset()


def _name_problems(path: str, name: object) -> list[Problem]:
    if not isinstance(name, str):
        return [Problem(path, f"must be a string, got {type(name).__name__}", "wrong_type")]
    if not _NAME.match(name):
        return [Problem(path, f"{name!r} is not {_NAME_RULE}", "bad_name")]
    return []


def validate_membership(replica: object, settings: MembershipSettings) -> list[Problem]:
    """Every problem with a replica name and membership settings, each at its path."""
    problems = _name_problems("replica", replica)
    timings = {
        "lease_duration": settings.lease_duration,
        "renew_deadline": settings.renew_deadline,
        "retry_period": settings.retry_period,
    }
    positive = True
    for key, value in timings.items():
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if not is_number or not math.isfinite(value) or value <= 0:
            problems.append(
                Problem(
                    f"settings.{key}",
                    f"must be a number of seconds above 0, got {value!r}",
                    "not_positive",
                )
            )
            positive = False
    if not positive:
        return problems
    if settings.renew_deadline >= settings.lease_duration:
        problems.append(
            Problem(
                "settings.renew_deadline",
                f"must be less than lease_duration ({settings.lease_duration:g} s), "
                f"got {settings.renew_deadline:g} s",
                "conflict",
            )
        )
    if settings.renew_deadline <= JITTER_FACTOR * settings.retry_period:
        problems.append(
            Problem(
                "settings.retry_period",
                f"must be less than renew_deadline / {JITTER_FACTOR} "
                f"({settings.renew_deadline / JITTER_FACTOR:g} s), got {settings.retry_period:g} s",
                "conflict",
            )
        )
    return problems


def check_membership(replica: object, settings: MembershipSettings) -> None:
    """Raise :class:`InvalidConfig` listing every problem of :func:`validate_membership`."""
    if problems := validate_membership(replica, settings):
        raise InvalidConfig(
            "the membership's settings are not valid",
            problems,
            remedy="Name the replica as a DNS label; keep lease_duration > renew_deadline > "
            "1.2 x retry_period (client-go's defaults: 15, 10 and 2 s).",
        )


def check_singleton_name(name: object) -> None:
    """Raise :class:`InvalidInput` unless ``name`` can name a singleton."""
    if problems := _name_problems("name", name):
        raise InvalidInput("the singleton's name is not valid", problems)
