"""The adapter's view of its containers, kept current by the daemon's event stream.

One background task opens ``GET /events`` (this owner's containers only), then lists and
inspects what exists, then applies every event as it arrives: ``observe`` answers from here
with no call to the daemon. The daemon keeps few events and drops slow readers, so a lost
stream is reconnected, relisted, and reported to watchers as ``MISSED`` after the relist
(never a silent gap). ``confirmed_at`` is the last time the open stream was proved current
(an event, or a probe answered while it was open). The probe runs every ``probe_interval``
whatever the stream does: a hung daemon leaves its stream open and quiet, so an open stream
proves nothing by itself. Past ``max_staleness`` unconfirmed, reads raise
``AdapterUnavailable``, open watches end with it, and the stream is dropped and opened again
(a healed partition is found by the next attempt).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs
from anyio.abc import TaskGroup

from pando_runtime import (
    AdapterUnavailable,
    BundleEvent,
    BundleEventKind,
    PandoRuntimeError,
)
from pando_runtime.plugin import BundleEventHub

from .._log import logger
from ..api import EngineError, EngineTransport
from ..manifests import Naming
from ._views import ContainerView, Stuck, parse_event, view_from_inspect

__all__ = ["BundleView", "ContainerCache"]

_LOG = logger("cache")

_ACTIONS = ["create", "start", "die", "oom", "destroy", "health_status"]
_RETRY_FIRST = 0.1
_RETRY_MOST = 2.0
_SILENT_PROBE = 1.0
"""Seconds between probes while the daemon does not answer."""


@attrs.frozen(kw_only=True)
class BundleView:
    """What the cache knows of one bundle now."""

    bundle_id: str
    containers: tuple[ContainerView, ...]
    network_id: str | None
    stuck: dict[str, Stuck]

    @property
    def exists(self) -> bool:
        """Anything of the bundle is deployed (or was asked for and is stuck)."""
        return bool(self.containers or self.network_id or self.stuck)

    def newest(self) -> dict[str, ContainerView]:
        """The newest container of each workload."""
        newest: dict[str, ContainerView] = {}
        for view in sorted(self.containers, key=lambda v: v.created):
            newest[view.workload] = view
        return newest


class ContainerCache:
    """This owner's containers and networks, from one relist and the event stream."""

    def __init__(
        self,
        transport: EngineTransport,
        naming: Naming,
        *,
        max_staleness: float,
        probe_interval: float,
        read_timeout: float,
    ) -> None:
        self._transport = transport
        self._naming = naming
        self._max_staleness = max_staleness
        self._probe_interval = probe_interval
        self._read_timeout = read_timeout
        self.hub = BundleEventHub()
        self._containers: dict[str, ContainerView] = {}
        self._networks: dict[str, str] = {}  # bundle id -> network id
        self.taken_subnets: set[str] = set()
        """Subnets of every network on the daemon, as last listed (and as the adapter made)."""
        self._stuck: dict[tuple[str, str], Stuck] = {}
        self._confirmed: datetime | None = None
        self._connected = False
        self._synced = anyio.Event()
        self._changed = anyio.Event()
        self._probe_now = anyio.Event()
        self._last_error: PandoRuntimeError | None = None
        self._group: TaskGroup | None = None
        self._stream_scope: anyio.CancelScope | None = None
        self._dropped: AdapterUnavailable | None = None
        self.relists = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, group: TaskGroup) -> None:
        """Run the stream in ``group`` (the adapter's) until it is cancelled."""
        if self._group is None:
            self._group = group
            group.start_soon(self._run)

    def stopped(self) -> None:
        """Forget the stream's state once its task group ended (the adapter may open again)."""
        self._group = None
        self._connected = False
        self._synced = anyio.Event()
        self._confirmed = None
        self._last_error = None
        self.hub.close()

    async def ready(self) -> None:
        """Wait for the first relist; raise ``AdapterUnavailable`` when it cannot be had."""
        if self._synced.is_set():
            return
        with anyio.move_on_after(self._read_timeout):
            while not self._synced.is_set():
                if self._last_error is not None:
                    raise self._last_error
                await self._wait_changed(0.05)
            return
        raise self._last_error or AdapterUnavailable(
            "the Docker daemon's containers could not be listed in time",
            details={"host": self._transport.host},
        )

    # -- reads ---------------------------------------------------------------------------------

    def confirmed_at(self) -> datetime:
        """When the view was last proved current; raises when that is too long ago.

        Whether the stream looks connected or not: a hung daemon's stream looks connected.
        """
        confirmed = self._confirmed
        if confirmed is None:
            raise self._last_error or AdapterUnavailable("the cache has not synced yet")
        stale = self._stale_error(confirmed)
        if stale is not None:
            raise stale
        return confirmed

    def _stale_error(self, confirmed: datetime) -> AdapterUnavailable | None:
        """Why a view confirmed at ``confirmed`` must not answer (``None``: it may)."""
        stale_for = (datetime.now(UTC) - confirmed).total_seconds()
        if stale_for <= self._max_staleness:
            return None
        answering = self._transport.answering
        why = "it does not answer" if answering.silent else "its event stream is lost"
        return AdapterUnavailable(
            f"the Docker daemon at {self._transport.host} has confirmed nothing for "
            f"{stale_for:.1f} s ({why}; the bound is {self._max_staleness:g} s)",
            remedy="Check that the Docker daemon runs and answers, and the link to it; "
            "observe answers again as soon as it does.",
            details={
                "confirmed_at": confirmed.isoformat(),
                "stale_for": round(stale_for, 1),
                "host": self._transport.host,
                "cause": "not_answering" if answering.silent else "stream_lost",
            },
        )

    def check_answers(self) -> None:
        """Raise unless the view is within its bound and the daemon was not found silent."""
        self.confirmed_at()
        self._transport.answering.check()

    async def answers_now(self) -> None:
        """The view is within its bound and the daemon answers now (one probe).

        At once while the daemon is silent: the background probe finds it back.
        """
        self.check_answers()
        await self._transport.answers_now()

    async def confirmed_since(self, wanted: datetime) -> datetime:
        """A confirmation at or after ``wanted`` (pings the daemon at once when needed)."""
        wanted = min(wanted, datetime.now(UTC))
        answering = self._transport.answering
        silent = False
        with anyio.move_on_after(self._read_timeout):
            while not silent:
                confirmed = self._confirmed
                if self._connected and confirmed is not None and confirmed >= wanted:
                    return confirmed
                self._probe_now.set()
                await self._wait_changed(0.05)
                silent = answering.silent  # the probe went unanswered: no point waiting
        confirmed = self._confirmed or wanted
        why = f"; {answering.error().message}" if silent else ""
        raise AdapterUnavailable(
            f"the Docker daemon has confirmed nothing since {confirmed.isoformat()}{why}",
            remedy="Retry when the daemon answers, or observe without 'not_before'.",
            details={
                "confirmed_at": confirmed.isoformat(),
                "not_before": wanted.isoformat(),
                "host": self._transport.host,
            },
        )

    @property
    def connected(self) -> bool:
        """Whether the event stream is open and the view synced with it."""
        return self._connected

    def bundle(self, bundle_id: str) -> BundleView:
        """What the cache knows of ``bundle_id``."""
        return BundleView(
            bundle_id=bundle_id,
            containers=tuple(v for v in self._containers.values() if v.bundle_id == bundle_id),
            network_id=self._networks.get(bundle_id),
            stuck={w: s for (b, w), s in self._stuck.items() if b == bundle_id},
        )

    def container(self, container_id: str) -> ContainerView | None:
        """One container's view."""
        return self._containers.get(container_id)

    def all_containers(self) -> tuple[ContainerView, ...]:
        """Every container of this owner."""
        return tuple(self._containers.values())

    def bundle_ids(self) -> set[str]:
        """Every bundle the view has anything of: a container, its network, a stuck workload."""
        return (
            {v.bundle_id for v in self._containers.values()}
            | set(self._networks)
            | {bundle_id for bundle_id, _ in self._stuck}
        )

    def limits_by_bundle(self) -> dict[str, tuple[int, int]]:
        """CPU millicores and memory bytes the limits of each bundle's containers hold.

        Only containers that hold room (:attr:`ContainerView.holds_room`) count; a bundle none
        of whose containers does is left out.
        """
        sums: dict[str, tuple[int, int]] = {}
        for view in self._containers.values():
            if view.holds_room:
                cpu, memory = sums.get(view.bundle_id, (0, 0))
                sums[view.bundle_id] = (cpu + view.limits[0], memory + view.limits[1])
        return sums

    async def wait_until(self, condition: Callable[[], bool], within: float) -> bool:
        """Wait for ``condition`` over the view; false when ``within`` seconds pass first."""
        with anyio.move_on_after(within):
            while not condition():
                await self._wait_changed(math.inf)
            return True
        return False

    async def _wait_changed(self, within: float) -> None:
        event = self._changed
        with anyio.move_on_after(within):
            await event.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- what apply writes through -------------------------------------------------------------

    def set_stuck(self, bundle_id: str, workload: str, stuck: Stuck | None) -> None:
        """Remember (or forget) why a workload is present but not started."""
        if stuck is None:
            self._stuck.pop((bundle_id, workload), None)
        else:
            self._stuck[(bundle_id, workload)] = stuck
        self._notify()

    def created(self, view: ContainerView) -> None:
        """Record a container the adapter just created, before its event arrives.

        Its limits count against the engine's room from now: a placement read right after
        the apply must not miss them. An event that came first keeps its view; only the
        limits (known from the create request) are added to it.
        """
        known = self._containers.get(view.id)
        self._containers[view.id] = (
            view if known is None else attrs.evolve(known, limits=view.limits)
        )
        self._notify()

    def set_network(self, bundle_id: str, network_id: str | None) -> None:
        """Record the bundle network the adapter created or removed."""
        if network_id is None:
            self._networks.pop(bundle_id, None)
        else:
            self._networks[bundle_id] = network_id
        self._notify()

    def network_ids(self) -> tuple[str, ...]:
        """Ids of this owner's bundle networks, as the cache knows them."""
        return tuple(self._networks.values())

    def note_networks(self, networks: list[dict[str, Any]]) -> None:
        """Take a listing of every network: this owner's bundle networks, all subnets taken."""
        owned = {}
        taken = set()
        for network in networks:
            labels = network.get("Labels") or {}
            if labels.get(self._naming.owner_key) == self._naming.owner:
                owned[labels.get(self._naming.bundle_key, "")] = str(network["Id"])
            for config in (network.get("IPAM") or {}).get("Config") or []:
                if config.get("Subnet"):
                    taken.add(str(config["Subnet"]))
        self._networks = owned
        self.taken_subnets = taken

    def forget_bundle(self, bundle_id: str) -> None:
        """Drop what apply remembered of a destroyed bundle."""
        for key in [k for k in self._stuck if k[0] == bundle_id]:
            del self._stuck[key]
        self._notify()

    # -- the stream ----------------------------------------------------------------------------

    async def _run(self) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(self._probe)
            await self._follow_again_and_again()

    async def _follow_again_and_again(self) -> None:
        delay = _RETRY_FIRST
        first = True
        while True:
            try:
                dropped = await self._follow(first)
                first = False
                delay = _RETRY_FIRST
            except PandoRuntimeError as error:
                self._last_error = error
                _LOG.warning("event stream lost: %s", error.message)
            except EngineError as error:
                self._last_error = AdapterUnavailable(
                    f"the Docker daemon refused the event stream ({error.status})",
                    details=error.details,
                )
            except (OSError, ValueError, anyio.EndOfStream, anyio.BrokenResourceError) as error:
                self._last_error = AdapterUnavailable(
                    f"the Docker daemon's event stream broke ({type(error).__name__})",
                    details={"host": self._transport.host},
                )
            else:
                self._last_error = dropped or AdapterUnavailable(
                    "the Docker daemon ended the event stream",
                    details={"host": self._transport.host},
                )
            if self._synced.is_set():
                first = False
            self._connected = False
            self._notify()
            self._end_watches_when_stale()
            # Woken early by a probe: a daemon that answers again is followed at once.
            await self._wait_changed(delay)
            delay = min(delay * 2, _RETRY_MOST)

    def _end_watches_when_stale(self) -> AdapterUnavailable | None:
        """Past the bound, open watches end with the error (the host opens new ones)."""
        confirmed = self._confirmed
        stale = None if confirmed is None else self._stale_error(confirmed)
        if stale is not None and len(self.hub) > 0:
            self.hub.fail(stale)
        return stale

    def _drop_when_stale(self) -> None:
        """Past the bound, end the watches and drop the stream (it is opened again)."""
        stale = self._end_watches_when_stale()
        scope = self._stream_scope
        if stale is not None and scope is not None and not scope.cancel_called:
            _LOG.warning("dropping the event stream: %s", stale.message)
            self._dropped = stale
            scope.cancel()

    async def _follow(self, first: bool) -> AdapterUnavailable | None:
        """Follow one stream until it ends; the error it was dropped with, if it was."""
        self._dropped = None
        try:
            with anyio.CancelScope() as self._stream_scope:
                await self._follow_stream(first)
        except BaseExceptionGroup as group:
            # The stream's tasks fail as a group: raise the first real error alone.
            errors = [e for e in group.exceptions if isinstance(e, Exception)]
            if errors:
                raise errors[0] from group
            raise
        finally:
            self._stream_scope = None
        return self._dropped

    async def _follow_stream(self, first: bool) -> None:
        filters = {"type": ["container"], "label": [self._naming.owner_filter], "event": _ACTIONS}
        broken: list[Exception] = []
        async with (
            self._transport.stream("GET", "/events", params={"filters": filters}, follow=True) as r,
            anyio.create_task_group() as group,
        ):
            send, receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)

            async def read() -> None:
                async with send:
                    try:
                        async for line in r.aiter_lines():
                            if line.strip():
                                send.send_nowait(json.loads(line))
                    except anyio.ClosedResourceError:
                        return
                    except Exception as error:  # noqa: BLE001 - any break ends the stream
                        broken.append(error)

            group.start_soon(read)
            await self._relist()
            self._connected = True
            self._last_error = None
            self._confirmed = datetime.now(UTC)
            self._synced.set()
            self._notify()
            if not first:
                self.hub.publish(BundleEvent(kind=BundleEventKind.MISSED, at=self._confirmed))
            async with receive:
                async for data in receive:
                    await self._on_event(data)
                    self._confirmed = datetime.now(UTC)
                    self._notify()
            self._connected = False
            group.cancel_scope.cancel()
        if broken:
            raise AdapterUnavailable(
                f"the Docker daemon's event stream broke ({type(broken[0]).__name__})",
                details={"host": self._transport.host},
            ) from broken[0]

    async def _probe(self) -> None:
        """Probe the daemon every interval (or when asked), stream or no stream.

        An answer while the stream is open proves the view current; no answer in time makes
        the daemon silent (every call fails at once), and past the bound the stream is dropped.
        """
        while True:
            # While silent, every second: the moment it answers again ends the refusals.
            silent = self._transport.answering.silent
            interval = min(self._probe_interval, _SILENT_PROBE) if silent else self._probe_interval
            with anyio.move_on_after(interval):
                await self._probe_now.wait()
            self._probe_now = anyio.Event()
            asked = datetime.now(UTC)
            answered = await self._transport.probe()
            if answered and self._connected:
                self._confirmed = max(self._confirmed or asked, asked)
            self._notify()
            self._drop_when_stale()

    async def _relist(self) -> None:
        filters = {"label": [self._naming.owner_filter]}
        listed = await self._transport.get_json(
            "/containers/json", params={"all": True, "filters": filters}
        )
        containers: dict[str, ContainerView] = {}
        for item in listed:
            view = await self._inspect(str(item["Id"]))
            if view is not None:
                containers[view.id] = view
        # Every network, not only this owner's: the subnets taken are known without a call.
        networks = await self._transport.get_json("/networks")
        self._containers = containers
        self.note_networks(networks)
        self.relists += 1
        _LOG.debug("relisted %d containers, %d networks", len(containers), len(networks))

    async def _inspect(self, container_id: str) -> ContainerView | None:
        try:
            data = await self._transport.get_json(
                "/containers/{id}/json", args={"id": container_id}
            )
        except EngineError as error:
            if error.not_found:
                return None
            raise
        return view_from_inspect(data, self._naming)

    async def _on_event(self, data: dict[str, Any]) -> None:
        event = parse_event(data, self._naming)
        if event is None or not event.container_id:
            return
        before = self._containers.get(event.container_id)
        after = event.apply_to(before)
        oom = bool(after and after.oom_killed)
        if event.action in ("start", "die") and after is not None:
            # The event lacks what observe reports (the exact start, the address, whether the
            # kernel's OOM killer struck): one inspect per start and per exit, never per read.
            inspected = await self._inspect(event.container_id)
            if inspected is not None:
                after = attrs.evolve(inspected, running=event.action == "start")
                oom = oom or inspected.oom_killed
        if after is None:
            self._containers.pop(event.container_id, None)
        else:
            self._containers[event.container_id] = after
            if event.action == "start":
                self._stuck.pop((after.bundle_id, after.workload), None)
        published = event.bundle_event(oom)
        if published is not None:
            self.hub.publish(published)
