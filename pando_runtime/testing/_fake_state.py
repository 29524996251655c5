"""Keeping the fake adapter's world in a file, so separate processes (the CLI) share it.

What is kept: the plans applied, each workload's instance (running or how it
ended), volumes with their files, and edges. Logs and event streams live only
in the process that made them.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from .._contract._edge import EdgePlan
from .._contract._observed import WorkloadProblem
from .._contract._plans import BundlePlan
from .._contract._volumes import VolumeRequest
from .._input._convert import structure, unstructure
from ._fake_world import Bundle, Edge, FakeWorld, Instance, Volume, Workload

__all__ = ["FakeStateFile"]

VERSION = 2
"""2: a plan's carried files are written as ``content`` (text) or ``content_base64``."""


class FakeStateFile:
    """The file that keeps one fake world between processes.

    It remembers the text it read or wrote last, and writes nothing when the world
    still reads the same: a process that only read, a follower of logs for one,
    never puts back a world that another process changed meanwhile.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._known: str | None = None

    def load(self, world: FakeWorld) -> None:
        """Fill ``world`` from the file, when the file exists."""
        self._known = _load(world, self.path)

    def save(self, world: FakeWorld) -> None:
        """Write ``world`` to the file atomically, unless it reads as the file does."""
        text = _dump(world)
        if text == self._known:
            return
        target = Path(self.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=target.parent, delete=False, suffix=".tmp"
        ) as out:
            out.write(text)
        Path(out.name).replace(target)
        self._known = text


def _dump(world: FakeWorld) -> str:
    bundles = []
    leaving = [(b, True) for b in world.leaving.values()]
    for bundle, gone in [(b, False) for b in world.bundles.values()] + leaving:
        instances = {}
        for name, workload in bundle.workloads.items():
            instance = workload.instance
            if instance is None:
                continue
            instances[name] = {
                "number": instance.number,
                "digest": instance.digest,
                "node": instance.node,
                "started_at": instance.started_at.isoformat(),
                "running": instance.running,
                "exit_code": instance.exit_code,
                "oom_killed": instance.oom_killed,
                "healthy": instance.healthy,
                "problem": instance.problem,
                "problem_detail": instance.problem_detail,
                "stopping_until": (
                    instance.stopping_until.isoformat() if instance.stopping_until else None
                ),
                "log": base64.b64encode(b"".join(line for _, line in instance.log.lines)).decode(),
            }
        saved = {"plan": unstructure(bundle.plan), "instances": instances}
        if gone:  # destroyed, its instances still stopping
            saved["leaving"] = True
        bundles.append(saved)
    data = {
        "version": VERSION,
        "instances": world.instances_started,
        "bundles": bundles,
        "volumes": [
            {
                "request": unstructure(volume.request),
                "files": {p: base64.b64encode(c).decode() for p, c in volume.files.items()},
            }
            for volume in world.volumes.values()
        ],
        "edges": [unstructure(edge.plan) for edge in world.edges.values()],
    }
    return json.dumps(data)


def _carried_content_was_base64(data: dict[str, Any]) -> None:
    for saved in data["bundles"]:
        for workload in saved["plan"].get("workloads", ()):
            for carried in workload.get("files", ()):
                carried["content_base64"] = carried.pop("content")


def _instance(state: dict[str, Any]) -> Instance:
    """A saved instance, its log included."""
    stopping_until = state.get("stopping_until")
    instance = Instance(
        number=state["number"],
        digest=state["digest"],
        node=state["node"],
        started_at=datetime.fromisoformat(state["started_at"]),
        running=state["running"],
        exit_code=state["exit_code"],
        oom_killed=state["oom_killed"],
        healthy=state["healthy"],
        problem=WorkloadProblem(state["problem"]) if state.get("problem") else None,
        problem_detail=state.get("problem_detail", ""),
        stopping_until=datetime.fromisoformat(stopping_until) if stopping_until else None,
    )
    log = base64.b64decode(state["log"])
    if log:
        instance.log.write(instance.started_at, log)
    if not instance.running:
        instance.log.close()
    return instance


def _load(world: FakeWorld, path: str) -> str | None:
    """Read the world from ``path`` when it exists; returns the text read."""
    if not os.path.exists(path):  # noqa: PTH110 - plain str config
        return None
    text = Path(path).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    if data.get("version") == 1:
        _carried_content_was_base64(data)
    world.instances_started = data["instances"]
    for saved in data["bundles"]:
        plan = structure(saved["plan"], BundlePlan)
        workloads = {}
        for workload_plan in plan.workloads:
            workload = Workload(plan=workload_plan)
            state = saved["instances"].get(workload_plan.name)
            if state is not None:
                workload.instance = _instance(state)
            workloads[workload_plan.name] = workload
        group = world.leaving if saved.get("leaving") else world.bundles
        group[plan.bundle_id] = Bundle(plan=plan, workloads=workloads)
    for saved in data["volumes"]:
        request = structure(saved["request"], VolumeRequest)
        files = {p: base64.b64decode(c) for p, c in saved["files"].items()}
        world.volumes[request.volume_id] = Volume(request=request, files=files)
    for saved in data["edges"]:
        plan_edge = structure(saved, EdgePlan)
        world.edges[plan_edge.name] = Edge(plan=plan_edge)
    return text
