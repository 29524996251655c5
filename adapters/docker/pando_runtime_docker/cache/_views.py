"""What the cache holds of each container, read from an inspect or moved on by an event.

Pure: the projections of the daemon's JSON (``GET /containers/{id}/json``, the ``/events``
stream) into :class:`ContainerView`, and of a view into the contract's observed workload
and bundle events.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from pando_runtime import (
    BundleEvent,
    BundleEventKind,
    ObservedWorkload,
    WorkloadProblem,
)

from ..api import image_id
from ..manifests import Naming

__all__ = [
    "ContainerView",
    "EngineEvent",
    "Stuck",
    "limits_of",
    "parse_event",
    "parse_time",
    "view_from_inspect",
]


def parse_time(text: str | None) -> datetime | None:
    """An Engine timestamp (RFC 3339, nanoseconds) as a UTC datetime; ``None`` for never."""
    if not text or text.startswith("0001-01-01"):
        return None
    head, _, rest = text.partition(".")
    fraction = ""
    zone = "Z"
    if rest:
        digits = ""
        for index, char in enumerate(rest):
            if not char.isdigit():
                zone = rest[index:]
                break
            digits += char
        fraction = "." + (digits[:6] or "0")
    elif head.endswith("Z"):
        head = head[:-1]
    elif "+" in head[10:] or "-" in head[10:]:
        cut = max(head.rfind("+"), head.rfind("-"))
        head, zone = head[:cut], head[cut:]
    if zone == "Z":
        zone = "+00:00"
    return datetime.fromisoformat(head + fraction + zone).astimezone(UTC)


def limits_of(host_config: Mapping[str, Any]) -> tuple[int, int]:
    """The CPU millicores and memory bytes a container's ``HostConfig`` limits it to.

    0 where it sets none: a container without limits reserves nothing (as a pod without
    requests), so it takes nothing from the engine's room.
    """
    nano_cpus = int(host_config.get("NanoCpus") or 0)
    return nano_cpus // 1_000_000, int(host_config.get("Memory") or 0)


@attrs.frozen(kw_only=True)
class Stuck:
    """Why a workload is present but will not start by itself (no container, or not run)."""

    spec: str
    problem: WorkloadProblem
    detail: str


@attrs.frozen(kw_only=True)
class ContainerView:
    """One of the adapter's containers as the cache last knew it."""

    id: str
    bundle_id: str
    workload: str
    spec: str
    created: datetime
    running: bool = False
    started_at: datetime | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    healthy: bool | None = None
    image_id: str | None = None
    error: str = ""
    address: str | None = None
    limits: tuple[int, int] = (0, 0)
    """CPU millicores and memory bytes its ``HostConfig`` limits it to (0: no limit)."""
    epoch: int | None = None
    """The owner's epoch it was written under (``None``: written outside a membership)."""

    @property
    def holds_room(self) -> bool:
        """Whether its limits count against the engine's room: from its create until it ends.

        Running, or created and not started yet; an exited container, or one the daemon
        refused to start, holds nothing (as a finished pod on a node).
        """
        return self.running or (self.started_at is None and not self.error)

    def observed(self, *, stopping: bool = False) -> ObservedWorkload:
        """The contract's view of this container (``stopping``: a stop told it to end)."""
        problem = None
        if self.error and not self.running:
            problem = WorkloadProblem.CANNOT_START
        return ObservedWorkload(
            name=self.workload,
            present=True,
            running=self.running,
            instance_id=self.id,
            image_digest=self.image_id,
            started_at=self.started_at,
            exit_code=None if problem else self.exit_code,
            healthy=self.healthy if self.running else None,
            oom_killed=self.oom_killed,
            problem=problem,
            problem_detail=self.error if problem else "",
            stopping=stopping and self.running,
        )


def _health(state: Mapping[str, Any]) -> bool | None:
    status = (state.get("Health") or {}).get("Status")
    if status == "healthy":
        return True
    if status == "unhealthy":
        return False
    return None


def view_from_inspect(data: Mapping[str, Any], naming: Naming) -> ContainerView | None:
    """The view of an inspected container; ``None`` when it is not this owner's."""
    labels = (data.get("Config") or {}).get("Labels") or {}
    if labels.get(naming.owner_key) != naming.owner:
        return None
    state = data.get("State") or {}
    status = state.get("Status", "")
    started = parse_time(state.get("StartedAt"))
    ended = status in ("exited", "dead") or (status == "created" and bool(state.get("Error")))
    return ContainerView(
        id=str(data["Id"]),
        bundle_id=labels.get(naming.bundle_key, ""),
        workload=labels.get(naming.workload_key, ""),
        spec=labels.get(naming.spec_key, ""),
        created=parse_time(data.get("Created")) or datetime.now(UTC),
        running=bool(state.get("Running")) and not state.get("Restarting"),
        started_at=started,
        exit_code=int(state.get("ExitCode", 0)) if ended and started is not None else None,
        oom_killed=bool(state.get("OOMKilled")),
        healthy=_health(state),
        image_id=image_id(data.get("Image")) or data.get("Image"),
        error=str(state.get("Error") or "") if started is None else "",
        address=_address(data, labels.get(naming.bundle_key, ""), naming),
        limits=limits_of(data.get("HostConfig") or {}),
        epoch=epoch_of(labels, naming),
    )


def _address(data: Mapping[str, Any], bundle_id: str, naming: Naming) -> str | None:
    networks = (data.get("NetworkSettings") or {}).get("Networks") or {}
    endpoint = networks.get(naming.network_name(bundle_id)) or {}
    return endpoint.get("IPAddress") or None


@attrs.frozen(kw_only=True)
class EngineEvent:
    """One container event of the daemon's stream, reduced to what the cache needs."""

    action: str
    container_id: str
    at: datetime
    bundle_id: str
    workload: str
    spec: str
    exit_code: int | None = None
    epoch: int | None = None

    def apply_to(self, view: ContainerView | None) -> ContainerView | None:
        """The view after this event (``None``: the container is gone)."""
        if self.action == "destroy":
            return None
        if view is None:
            view = ContainerView(
                id=self.container_id,
                bundle_id=self.bundle_id,
                workload=self.workload,
                spec=self.spec,
                created=self.at,
                epoch=self.epoch,
            )
        if self.action == "start":
            return attrs.evolve(
                view,
                running=True,
                started_at=self.at,
                exit_code=None,
                oom_killed=False,
                healthy=None,
                error="",
            )
        if self.action == "die":
            return attrs.evolve(view, running=False, exit_code=self.exit_code)
        if self.action == "oom":
            return attrs.evolve(view, oom_killed=True)
        if self.action.startswith("health_status"):
            status = self.action.partition(":")[2].strip()
            healthy = True if status == "healthy" else False if status == "unhealthy" else None
            return attrs.evolve(view, healthy=healthy)
        return view

    def bundle_event(self, oom: bool) -> BundleEvent | None:
        """The contract's event for this one (``oom``: the container was OOM-killed)."""
        healthy: bool | None = None
        exit_code: int | None = None
        if self.action == "start":
            kind = BundleEventKind.STARTED
        elif self.action == "die":
            kind = BundleEventKind.OOM_KILLED if oom else BundleEventKind.EXITED
            exit_code = self.exit_code
        elif self.action == "destroy":
            kind = BundleEventKind.REMOVED
        elif self.action.startswith("health_status"):
            kind = BundleEventKind.HEALTH_CHANGED
            status = self.action.partition(":")[2].strip()
            healthy = True if status == "healthy" else False if status == "unhealthy" else None
        else:
            return None
        return BundleEvent(
            kind=kind,
            at=self.at,
            bundle_id=self.bundle_id,
            workload=self.workload,
            exit_code=exit_code,
            healthy=healthy,
        )


def parse_event(data: Mapping[str, Any], naming: Naming) -> EngineEvent | None:
    """An event of this owner's containers; ``None`` for anything else."""
    if data.get("Type") != "container":
        return None
    actor = data.get("Actor") or {}
    attributes = actor.get("Attributes") or {}
    if attributes.get(naming.owner_key) != naming.owner:
        return None
    nanos = data.get("timeNano")
    at = (
        datetime.fromtimestamp(int(nanos) / 1e9, UTC)
        if nanos
        else datetime.fromtimestamp(int(data.get("time", 0)), UTC)
    )
    code = attributes.get("exitCode")
    return EngineEvent(
        action=str(data.get("Action") or data.get("status") or ""),
        container_id=str(actor.get("ID") or data.get("id") or ""),
        at=at,
        bundle_id=attributes.get(naming.bundle_key, ""),
        workload=attributes.get(naming.workload_key, ""),
        spec=attributes.get(naming.spec_key, ""),
        exit_code=int(code) if code is not None and str(code).lstrip("-").isdigit() else None,
        epoch=epoch_of(attributes, naming),
    )


def epoch_of(labels: Mapping[str, Any], naming: Naming) -> int | None:
    """The epoch label's number; ``None`` when absent or not a number (not a member's write)."""
    text = str(labels.get(naming.epoch_key) or "")
    return int(text) if text.isdigit() else None
