"""A warm start: what the cache holds taken as a state, and an informer resumed from one."""

from __future__ import annotations

import anyio

from ._informer import Informer
from ._list_watch import SharedAnswer
from ._stores import CacheState

__all__ = ["resume", "snapshot"]


def snapshot(informer: Informer) -> CacheState:
    """What the stores hold now, with each watch's version (nothing copied but lists)."""
    return CacheState(
        versions={kind: loop.resource_version for kind, loop in informer.loops.items()},
        pods=[f for pods in informer.pods.by_namespace.values() for f in pods.values()],
        gateways=[f for kept in informer.gateways.by_namespace.values() for f in kept.values()],
        services=[(ns, n) for ns, names in informer.services.by_namespace.items() for n in names],
        namespaces=list(informer.namespaces.by_name.values()),
        claims=[f for kept in informer.claims.by_namespace.values() for f in kept.values()],
        confirmed=informer.staleness.confirmations(),
    )


def resume(informer: Informer, state: CacheState) -> None:
    """Before the informer runs: hold ``state`` (saved earlier) and watch on from its versions.

    Until each watch has caught up the cache is not synced (reads wait, then read the API),
    except that observe may answer from a saved state whose confirmation (``state.confirmed``)
    is within ``max_staleness`` (``Staleness.serves_saved``); the pod events of the catch-up
    are kept for the first event stream.
    """
    informer.pods.on_list(state.pods, relist=False)
    informer.gateways.on_list(state.gateways, relist=False)
    informer.services.on_list(state.services, relist=False)
    informer.namespaces.on_list(state.namespaces, relist=False)
    informer.claims.on_list(state.claims, relist=False)
    informer.pods.replay = []
    newest = SharedAnswer(informer.newest_version) if informer.newest_version else None
    now = anyio.current_time()
    for kind, loop in informer.loops.items():
        confirmed = state.confirmed.get(kind)
        saved_at = None if confirmed is None else min(now, informer.clock.monotonic(confirmed))
        loop.resume(state.versions[kind], newest, saved_at)
