"""The fake's test controls: what a test makes the runtime do, and what it looks at.

:class:`FakeControls` is the part of :class:`~pando_runtime.testing.FakeAdapter` that
no real runtime has: scripting images and exec commands, ending workloads, changing
health and usage, losing events, taking the watch cache down, crashing or cutting off a
replica's membership, and reading the world back (plans, placements, volume files, what
egress and ingress allow). Every control
acts on the adapter's world, so a control used through one replica is seen by all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .._contract._errors import AdapterUnavailable
from .._contract._events import BundleEvent, BundleEventKind
from .._contract._plans import BundlePlan, EgressPolicy, Port, PortProtocol
from .._contract._refs import BundleRef, WorkloadRef
from ._clock import FakeClock
from ._fake_exec import ExecHandler
from ._fake_membership import FakeLeaseStore, ReplicaLink
from ._fake_world import LOG, FakeNode, FakeWorld, ImageBehaviour
from ._faults import Faults

__all__ = ["FakeControls"]

_ANSWERED_FROM_THE_VIEW = frozenset(
    {"observe", "holds", "held_bundles", "capabilities", "check_plan", "watch_bundles"}
)
"""What a hung fake still answers, from what was confirmed (within its bound)."""


class FakeControls:
    """Test controls and inspection over :attr:`world` (a part of the fake adapter)."""

    world: FakeWorld
    link: ReplicaLink
    """This replica's own path to the runtime's leases."""

    # -- this replica's membership ------------------------------------------------------------

    def kill(self) -> None:
        """Crash this replica's membership: it stops renewing and releases nothing."""
        self.link.kill()

    def cut_off(self) -> None:
        """Every lease call of this replica fails (``AdapterUnavailable``) until reconnected."""
        self.link.cut = True

    def reconnect(self) -> None:
        """Undo :meth:`cut_off`."""
        self.link.cut = False

    """The fake runtime this adapter talks to, shared with its replicas."""

    # -- the world's parts, for inspection ------------------------------------------------

    @property
    def clock(self) -> FakeClock:
        """The runtime's time source."""
        return self.world.clock

    @property
    def nodes(self) -> list[FakeNode]:
        """The places workloads run."""
        return self.world.nodes

    @property
    def faults(self) -> Faults:
        """The runtime's scripted failures and latency (shared by every replica)."""
        return self.world.faults

    @property
    def calls(self) -> Counter[str]:
        """How often each method was called, failed calls included."""
        return self.world.faults.calls

    @property
    def lease_store(self) -> FakeLeaseStore:
        """The leases every replica of this fake runtime shares (``replica()``)."""
        return self.world.lease_store

    @property
    def writes(self) -> int:
        """How many changes the fake made; an idempotent apply adds none."""
        return self.world.writes

    @property
    def reads(self) -> int:
        """How many expensive (placement) reads ran; a read scope shares one."""
        return self.world.reads

    @property
    def trial_egress(self) -> dict[str, EgressPolicy | None]:
        """The egress rules each trial ran under, by trial id."""
        return self.world.trial_egress

    @property
    def start_order(self) -> list[WorkloadRef]:
        """Every workload instance started, in order."""
        return self.world.start_order

    @property
    def images(self) -> set[str]:
        """The images imported (``import_image``)."""
        return self.world.images

    @property
    def healthy_runtime(self) -> bool:
        """Whether ``health_check`` passes (:meth:`set_runtime_health`)."""
        return self.world.healthy

    # -- scripting --------------------------------------------------------------------------

    def script_image(self, image: str, behaviour: ImageBehaviour) -> None:
        """Make every workload or trial started from ``image`` behave as ``behaviour``."""
        self.world.behaviours[image] = behaviour

    def on_exec(self, command_prefix: Iterable[str], handler: ExecHandler) -> None:
        """Play commands starting with ``command_prefix`` with ``handler`` (latest wins)."""
        self.world.exec_handlers.insert(0, (tuple(command_prefix), handler))

    def exit_workload(self, ref: WorkloadRef, exit_code: int = 0) -> None:
        """End the running instance of a workload with ``exit_code``."""
        self.world.end(ref, self.world.running(ref), exit_code=exit_code, oom=False)

    def oom_kill(self, ref: WorkloadRef) -> None:
        """End the running instance as the kernel's OOM killer would (exit code 137)."""
        self.world.end(ref, self.world.running(ref), exit_code=137, oom=True)

    def set_health(self, ref: WorkloadRef, healthy: bool | None) -> None:
        """Change a running workload's health signal (emits ``HEALTH_CHANGED``)."""
        instance = self.world.running(ref)
        if instance.healthy != healthy:
            instance.healthy = healthy
            self.world.emit(BundleEventKind.HEALTH_CHANGED, ref, healthy=healthy)

    def write_log(self, ref: WorkloadRef, data: bytes) -> None:
        """Append ``data`` to the log of the workload's newest instance."""
        self.world.newest(ref).log.write(self.world.clock.now(), data)

    def set_usage(self, ref: WorkloadRef, *, cpu_millis: int, memory_bytes: int) -> None:
        """What ``usage``/``in_use`` report for a running workload."""
        instance = self.world.running(ref)
        instance.cpu_millis, instance.memory_bytes = cpu_millis, memory_bytes

    def simulate_gap(self) -> None:
        """Tell every event stream that events were lost (they receive ``MISSED``)."""
        LOG.warning("event gap: %d streams told to resync", len(self.world.events))
        self.world.events.publish(
            BundleEvent(kind=BundleEventKind.MISSED, at=self.world.clock.now())
        )

    def simulate_cache_down(self) -> None:
        """The runtime stops confirming what observe answers, as a cache whose watch is down.

        ``observe`` then reports the moment it went down as ``confirmed_at``, and raises
        ``AdapterUnavailable`` once that is more than ``max_staleness`` seconds ago on the
        clock; :meth:`simulate_cache_up` ends it.
        """
        self.world.cache_down()

    def simulate_cache_up(self) -> None:
        """The runtime confirms again (after :meth:`simulate_cache_down`).

        An ``observe(..., not_before=...)`` waiting for a confirmation then answers.
        """
        self.world.cache_up()

    def simulate_hang(self) -> None:
        """The runtime hangs, its connections open: it answers nothing and closes nothing.

        As a deadlocked daemon or a partition that drops packets, found out by the adapter at
        once: every call that needs the runtime raises ``AdapterUnavailable`` ("does not
        answer"), while ``observe``, ``holds`` and ``held_bundles`` answer from what was
        confirmed until ``max_staleness`` passes on the clock (as
        :meth:`simulate_cache_down`). :meth:`simulate_answer` ends it.
        """
        self.world.hung = True
        self.world.cache_down()

    def simulate_answer(self) -> None:
        """The runtime answers again (after :meth:`simulate_hang`)."""
        self.world.hung = False
        self.world.cache_up()

    def _refuse_when_hung(self, method: str) -> None:
        """Raise while the runtime hangs, unless ``method`` answers from what was confirmed."""
        if self.world.hung and method not in _ANSWERED_FROM_THE_VIEW:
            raise AdapterUnavailable(
                "the fake runtime does not answer",
                remedy="simulate_answer() ends the hang.",
                details={"cause": "not_answering"},
            )

    def drop_event_streams(self) -> None:
        """Cut every open event stream: each raises ``AdapterUnavailable`` when read."""
        self.world.events.fail(AdapterUnavailable("the event stream was lost"))

    def fail_edge(self, name: str, detail: str) -> None:
        """Make an applied edge stop serving, for ``detail`` (``observe_edge`` says it)."""
        self.world.edge(name).failure = detail

    def lose_node(self, node: str) -> None:
        """Node ``node`` stops reporting, as one cut off from the control plane.

        Its running instances are observed ``lost`` (not running); they keep running there,
        unseen. Applying the plan again starts new instances on other nodes (none is placed
        on a lost node); the old ones run on until :meth:`recover_node`.
        """
        self.world.lose_node(node)

    def recover_node(self, node: str) -> None:
        """Node ``node`` reports again.

        The instances it still runs that were replaced (or removed) meanwhile are stopped; one
        never replaced is observed running again, the same instance.
        """
        self.world.recover_node(node)

    def instances_running(self, ref: WorkloadRef) -> int:
        """How many instances of the workload run, seen or not (on lost nodes too)."""
        bundle = self.world.bundles.get(ref.bundle_id)
        newest = bundle.workloads.get(ref.workload) if bundle is not None else None
        seen = int(newest is not None and newest.instance is not None and newest.instance.running)
        unseen = sum(1 for r, i in self.world.stranded if r == ref and i.running)
        return seen + unseen

    def set_runtime_health(self, healthy: bool) -> None:
        """Make ``health_check`` pass or fail."""
        self.world.healthy = healthy

    # -- inspection -------------------------------------------------------------------------

    def bundle_ids(self) -> list[str]:
        """Ids of every bundle the fake holds."""
        return sorted(self.world.bundles)

    def egress_allowed(self, ref: BundleRef, destination: str, port: int) -> bool:
        """Whether the bundle's workloads may connect to ``destination`` on ``port``.

        The fake's model of enforcement: its plan's egress rules as data (no rules: any).
        """
        egress = self.world.bundle(ref.bundle_id).plan.network.egress
        return egress is None or egress.allows(destination, port)

    def ingress_allowed(
        self, ref: WorkloadRef, port: int, protocol: PortProtocol | str = PortProtocol.TCP
    ) -> bool:
        """Whether anything outside the workload's app may connect to it on ``port``.

        Outside is the host's proxy and the edge. The fake's model of enforcement: only an
        exposed workload, and only on a port its plan lists (protocol included); the
        workloads of its own app reach it on any port.
        """
        plan = self.world.workload(ref).plan
        return plan.exposed and Port(port, PortProtocol(protocol)) in plan.ports

    def plan_of(self, bundle_id: str) -> BundlePlan:
        """The last plan applied for ``bundle_id``."""
        return self.world.bundle(bundle_id).plan

    def instances_started(self, ref: WorkloadRef) -> int:
        """How many instances of this workload were ever started."""
        return self.world.start_order.count(ref)

    def volume_files(self, volume_id: str) -> dict[str, bytes]:
        """The files a volume holds, by relative path (a copy)."""
        return dict(self.world.volume(volume_id).files)

    def write_volume_file(self, volume_id: str, path: str, content: bytes) -> None:
        """Write a file into a volume, as a workload would."""
        self.world.volume(volume_id).files[path.lstrip("/")] = content

    def placement(self, ref: WorkloadRef) -> str | None:
        """The node the workload's running instance was placed on."""
        instance = self.world.bundle(ref.bundle_id).workloads[ref.workload].instance
        return instance.node if instance and instance.running else None

    def instance_runs(self, ref: WorkloadRef, instance_id: str) -> bool:
        """Whether instance ``instance_id`` (as observed) of the workload still runs.

        Stopping instances whose grace ran out on the clock are removed first.
        """
        self.world.settle_stops()
        for group in (self.world.bundles, self.world.leaving):
            bundle = group.get(ref.bundle_id)
            workload = bundle.workloads.get(ref.workload) if bundle else None
            instance = workload.instance if workload else None
            if instance is not None and f"fake-instance-{instance.number}" == instance_id:
                return instance.running
        return False
