"""Reading a pod's status: a container's state, and why a pod cannot start."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["container_state", "start_problem", "waits_for_its_claims"]

_PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
_CLAIM_NOT_SEEN = re.compile(r'persistentvolumeclaim "[^"]*" not found')


def waits_for_its_claims(unschedulable: str) -> bool:
    """Whether the scheduler's refusal only waits on the pod's claims: no lack of room.

    A claim still binding, or one created just before its pod that the scheduler's cache has
    not seen yet: the scheduler tries again by itself, so the pod is pending, not refused.
    """
    return "unbound immediate PersistentVolumeClaims" in unschedulable or bool(
        _CLAIM_NOT_SEEN.search(unschedulable)
    )


def container_state(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The ``state`` of container ``name`` (``{"running": ...}`` and so on); empty when unknown."""
    for status in (body.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") == name:
            return dict(status.get("state") or {})
    return {}


def start_problem(body: Mapping[str, Any], container: str | None = None) -> str | None:
    """Why the pod (or that container of it) will not start, in words; ``None`` while it may."""
    status = body.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return f"it cannot be scheduled: {condition.get('message')}"
    for each in status.get("containerStatuses") or ():
        if container is not None and each.get("name") != container:
            continue
        waiting = (each.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _PULL_FAILURES:
            return f"its image cannot be pulled: {waiting.get('message') or waiting['reason']}"
    return None
