"""What a runtime reports about a bundle: observed, never remediated.

Observed state never carries a workload's environment: it is secret-bearing
input, one-way.
"""

from __future__ import annotations

import enum
from datetime import datetime

import attrs

from .._util._frozen import frozen_tuple
from ._volumes import VolumeHandle

__all__ = ["ObservedBundle", "ObservedVolume", "ObservedWorkload", "WorkloadProblem"]


class WorkloadProblem(enum.StrEnum):
    """Why a present workload does not run and will not start by itself: what a host can act on.

    ``IMAGE_PULL``: its image cannot be fetched (it does not exist, or the registry refuses the
    credentials); ``UNSCHEDULABLE``: no place in the runtime can take it now; ``CANNOT_START``:
    the runtime refuses to start it as planned (its command or configuration).
    """

    IMAGE_PULL = "image_pull"
    UNSCHEDULABLE = "unschedulable"
    CANNOT_START = "cannot_start"


@attrs.frozen(kw_only=True)
class ObservedWorkload:
    """The newest instance of one workload, as the runtime sees it.

    ``healthy`` is tri-state: ``None`` means the runtime has no health signal
    (no health check, or none has run yet). ``exit_code`` is set once the
    instance has ended. ``present`` is false when the plan names the workload
    but no instance exists (never started, or stopped). ``instance_id`` is
    opaque and changes whenever a new instance replaces the old one.
    ``problem`` says why a present instance is stuck before running (``None`` while
    it runs, ended, or may still start), ``problem_detail`` the runtime's words for
    it (never a credential; not part of equality: the words change while the problem
    stays).
    ``stopping``: the runtime was told to end this instance (``stop``, ``destroy``, a
    replacement) and it still runs, ending gracefully; ``running`` stays true until it has
    ended, so a workload is never reported stopped while its instance may still serve.
    ``lost`` is true when the place the instance runs on (a node) no longer reports, so its
    state is unknown: it is not called ``running`` (nothing confirms it runs), but it may
    still run there, unseen, until that place reports again and learns it was replaced.
    Applying the plan again starts a new instance elsewhere (a new ``instance_id``); the old
    one is stopped once its place is back. A host that must never have two instances at once
    waits for the place to come back (or fences it) before it applies again.
    """

    name: str
    present: bool
    running: bool
    instance_id: str | None = None
    image_digest: str | None = None
    started_at: datetime | None = None
    exit_code: int | None = None
    restart_count: int = 0
    healthy: bool | None = None
    lost: bool = False
    restarting: bool = False
    oom_killed: bool = False
    problem: WorkloadProblem | None = None
    problem_detail: str = attrs.field(default="", eq=False)
    stopping: bool = False

    @property
    def ended(self) -> bool:
        """The instance ran and has finished (with ``exit_code``)."""
        return self.present and not self.running and self.exit_code is not None


@attrs.frozen(kw_only=True)
class ObservedVolume:
    """A volume of the bundle and whether the runtime still has it."""

    volume_id: str
    present: bool
    handle: VolumeHandle | None = None


@attrs.frozen(kw_only=True)
class ObservedBundle:
    """A bundle as observed; ``exists`` is false when nothing of it is deployed.

    ``confirmed_at`` (UTC) is when the runtime last confirmed this answer: the time of the
    read for an adapter that reads the runtime on each call, the last time its cache was
    known current for one that answers from a cache (``None``: the adapter does not say); it
    is not part of equality.
    An adapter never answers from state unconfirmed for longer than its own bound: past it,
    ``observe`` raises ``AdapterUnavailable``.
    A destroyed bundle still ``exists`` while an instance of it runs (its workloads are
    ``stopping``): ``exists=False`` means nothing of it runs any more.
    ``stopping_reported`` (API 1.7) is false in an answer from an adapter written before
    API 1.3, which never says ``stopping``: there ``exists=False``, or a workload not running,
    does not promise that nothing of it still runs.
    """

    bundle_id: str
    exists: bool
    workloads: tuple[ObservedWorkload, ...] = attrs.field(default=(), converter=frozen_tuple)
    volumes: tuple[ObservedVolume, ...] = attrs.field(default=(), converter=frozen_tuple)
    confirmed_at: datetime | None = attrs.field(default=None, eq=False)
    """Not part of equality: two observations of the same state are equal."""
    stopping_reported: bool = True

    def workload(self, name: str) -> ObservedWorkload:
        """The observed workload called ``name``; ``KeyError`` when there is none."""
        for workload in self.workloads:
            if workload.name == name:
                return workload
        raise KeyError(name)

    def volume(self, volume_id: str) -> ObservedVolume:
        """The observed volume with ``volume_id``; ``KeyError`` when there is none."""
        for volume in self.volumes:
            if volume.volume_id == volume_id:
                return volume
        raise KeyError(volume_id)

    @property
    def all_running(self) -> bool:
        """Every workload is present and running, none of them stopping."""
        return self.exists and all(w.running and not w.stopping for w in self.workloads)

    @property
    def stopping(self) -> bool:
        """Some instance was told to end and still runs."""
        return any(w.stopping for w in self.workloads)
