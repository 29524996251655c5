"""The engine's firewall, as far as the adapter's own rules rest on it.

The egress guard and private networks (``egress_guard_image``) write iptables rules reached
from ``DOCKER-USER``; restricted egress (``egress_gateway_image``) rests on Docker's own rules
isolating internal networks. An engine run with ``--iptables=false`` writes no rules at all,
and the nftables firewall backend (Docker 29, opt-in) has no ``DOCKER-USER``. ``/info`` names
the backend (``FirewallBackend``) where the API version spoken offers it (1.49 and later), but
names ``iptables`` for an engine run with ``--iptables=false`` too (seen on 28.5): only the
guard's own check in the daemon's namespace (when ``egress_guard_image`` is set) looks at the
chains themselves, and what it found comes first. Without the guard, an engine that writes no
rules cannot be told on any version; the nftables backend can, from ``/info``.

The health check reads it. Once known to be unusable, the capabilities no longer declare
private networks nor restricted egress, and ``check_plan`` refuses what needs them, naming
the firewall and what to change, before anything is written: never the guard's iptables
remedy after a failed apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from pando_runtime import AdapterFailed, BundlePlan, Capability, CapabilityUnsupported

from .._log import logger
from ..api import EngineTransport

__all__ = [
    "EngineFirewall",
    "Firewall",
    "firewall_from_info",
    "firewall_refused",
    "plan_refusal",
]

_LOG = logger("egress")


@attrs.frozen
class Firewall:
    """The firewall an engine writes its rules with: its name, and where that was read."""

    name: str
    """As the engine names it (``iptables``, ``iptables+firewalld``, ``nftables``), or
    ``none`` for an engine that writes no rules (``dockerd --iptables=false``)."""
    source: str

    @property
    def usable(self) -> bool:
        """Whether the adapter's rules can be written: Docker's iptables chains are there."""
        return self.name.startswith("iptables")


def firewall_from_info(info: Mapping[str, Any]) -> Firewall | None:
    """The firewall ``/info`` names; ``None`` when the answer has no ``FirewallBackend``."""
    if "FirewallBackend" not in info:
        return None  # an API below 1.49: the field is not offered
    backend = info.get("FirewallBackend") or {}  # null: no firewall (a daemon not on Linux)
    return Firewall(str(backend.get("Driver") or "none"), "/info FirewallBackend")


def _what(firewall: Firewall) -> str:
    if firewall.name == "none":
        return "writes no firewall rules (dockerd --iptables=false)"
    return f"uses the {firewall.name} firewall backend, which has no DOCKER-USER chain"


_REMEDY = (
    "Run dockerd with its iptables firewall (the default: no --iptables=false, no "
    "--firewall-backend=nftables), or unset {settings} to run without them "
    "(docs/docker.md, A firewall the guards cannot use)."
)


def firewall_refused(firewall: Firewall, needs: str) -> AdapterFailed:
    """The refusal of everything: ``needs`` (a setting) cannot work on this engine."""
    return AdapterFailed(
        f"the engine {_what(firewall)} (read from {firewall.source}): {needs} cannot write "
        "its rules; no plan is applied",
        remedy=_REMEDY.format(settings="'egress_guard_image'"),
        details={"firewall": firewall.name, "source": firewall.source},
    )


class _Guard(Protocol):
    """The egress guard as the firewall sees it (``EgressGuard``)."""

    @property
    def firewall(self) -> Firewall | None: ...

    async def probe(self) -> Firewall: ...


class EngineFirewall:
    """What the engine's firewall allows of the adapter's settings, as last read."""

    def __init__(self, api: EngineTransport, guard: _Guard | None, *, gateway: bool) -> None:
        self._api = api
        self._guard = guard
        self._gateway = gateway
        self._read: Firewall | None = None

    @property
    def known(self) -> Firewall | None:
        """The firewall as last read (no call): the guard's finding first, else ``/info``'s.

        The guard's run looked at the chains in the daemon's namespace; ``/info`` names only
        the backend.
        """
        found = self._guard.firewall if self._guard else None
        return found or self._read

    @property
    def needed(self) -> bool:
        """Whether a setting rests on the firewall (the guard or restricted egress)."""
        return self._guard is not None or self._gateway

    @property
    def refuses_rules(self) -> bool:
        """Whether the engine is known to have a firewall the adapter's rules cannot use."""
        known = self.known
        return known is not None and not known.usable

    async def check(self) -> None:
        """Read the firewall; raise when the guard cannot work, log when egress cannot."""
        if not self.needed:
            return
        info: dict[str, Any] = await self._api.get_json("/info")
        self._read = firewall_from_info(info)
        named_usable = self._read is None or self._read.usable
        if named_usable and self._guard is not None and self._guard.firewall is None:
            # "iptables" in /info even under --iptables=false: the chains themselves tell
            # (once: a daemon changes its firewall only on a restart)
            await self._guard.probe()
        known = self.known
        if known is None or known.usable:
            return
        if self._guard is not None:
            raise firewall_refused(known, "the egress guard ('egress_guard_image')")
        _LOG.warning(
            "the engine %s (read from %s): plans restricting egress are refused",
            _what(known),
            known.source,
        )

    def check_plan(self, plan: BundlePlan) -> None:
        """Refuse, before anything is written, what the known firewall cannot give."""
        refusal = plan_refusal(self.known, plan, guarded=self._guard is not None)
        if refusal is not None:
            raise refusal


def plan_refusal(
    known: Firewall | None, plan: BundlePlan, *, guarded: bool
) -> AdapterFailed | CapabilityUnsupported | None:
    """Why ``plan`` cannot run under the firewall ``known`` (``guarded``: the guard is set)."""
    if known is None or known.usable:
        return None
    if guarded:
        return firewall_refused(known, "the egress guard ('egress_guard_image')")
    if plan.network.egress is None:
        return None
    return CapabilityUnsupported(
        Capability.EGRESS_RESTRICTION,
        f"plan for bundle {plan.bundle_id!r} restricts egress, and the engine "
        f"{_what(known)} (read from {known.source}): its internal network would not "
        "be isolated",
        remedy=_REMEDY.format(settings="'egress_gateway_image'"),
        details={"firewall": known.name, "path": "network.egress"},
    )
