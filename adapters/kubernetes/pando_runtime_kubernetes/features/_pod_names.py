"""Creating a bare pod whose name derives from the pod it replaces: two writers, one pod."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pando_runtime import AdapterFailed

from ..session._session import ClusterSession

__all__ = ["create_pod"]


async def create_pod(
    session: ClusterSession,
    build: Callable[[str | None], dict[str, Any]],
    replaces: str | None,
    *,
    twin: Callable[[Mapping[str, Any]], bool],
    what: str,
) -> tuple[str, Mapping[str, Any]]:
    """Create the pod ``build(replaces)`` makes (its name derives from ``replaces``).

    Two writers of one state derive one name: the API server refuses the second
    create (409), and an existing pod of that name is adopted when ``twin`` says it
    runs what this one would. One that ended or is leaving holds the name: the next
    pod replaces it. Returns the pod's name and the pod as the API server stored it.
    """
    for _ in range(3):
        body = build(replaces)
        name = str(body["metadata"]["name"])
        created, existing = await session.writer.create_or_find(body, what)
        if created:
            return name, existing or body
        if existing is None:
            continue  # deleted meanwhile: the name is free again
        if twin(existing):
            session.cache.remember(existing)
            return name, existing
        replaces = str((existing.get("metadata") or {}).get("uid") or name)
    raise AdapterFailed(
        f"cannot name a pod to {what}: its names keep being taken",
        remedy="Apply again.",
        details={"pod": name},
    )
