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
from typing import TYPE_CHECKING, Any

from .._convert import structure, unstructure
from .._edge import EdgePlan
from .._observed import WorkloadProblem
from .._plans import BundlePlan
from .._volumes import VolumeRequest

if TYPE_CHECKING:
    from ._fake import FakeAdapter

__all__ = ["load_state", "save_state"]

VERSION = 2
"""2: a plan's carried files are written as ``content`` (text) or ``content_base64``."""


def save_state(fake: FakeAdapter, path: str, *, unless: str | None = None) -> str:
    """Write the fake's world to ``path`` atomically; returns the text written.

    Nothing is written when the text equals ``unless`` (what was loaded): a
    process that only read, a follower of logs for one, never puts back a world
    that another process changed meanwhile.
    """
    bundles = []
    for bundle in fake._bundles.values():  # noqa: SLF001 - the fake's own persistence
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
                "log": base64.b64encode(b"".join(line for _, line in instance.log.lines)).decode(),
            }
        bundles.append({"plan": unstructure(bundle.plan), "instances": instances})
    data = {
        "version": VERSION,
        "instances": fake._instances,  # noqa: SLF001
        "bundles": bundles,
        "volumes": [
            {
                "request": unstructure(volume.request),
                "files": {p: base64.b64encode(c).decode() for p, c in volume.files.items()},
            }
            for volume in fake._volumes.values()  # noqa: SLF001
        ],
        "edges": [unstructure(edge.plan) for edge in fake._edges.values()],  # noqa: SLF001
    }
    text = json.dumps(data)
    if text == unless:
        return text
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, suffix=".tmp") as out:
        out.write(text)
    Path(out.name).replace(target)
    return text


def _carried_content_was_base64(data: dict[str, Any]) -> None:
    for saved in data["bundles"]:
        for workload in saved["plan"].get("workloads", ()):
            for carried in workload.get("files", ()):
                carried["content_base64"] = carried.pop("content")


def load_state(fake: FakeAdapter, path: str) -> str | None:
    """Read the fake's world from ``path`` when it exists; returns the text read."""
    from ._fake import _Bundle, _Edge, _Instance, _Volume, _Workload  # noqa: PLC0415

    if not os.path.exists(path):  # noqa: PTH110 - plain str config
        return None
    text = Path(path).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    if data.get("version") == 1:
        _carried_content_was_base64(data)
    fake._instances = data["instances"]  # noqa: SLF001
    for saved in data["bundles"]:
        plan = structure(saved["plan"], BundlePlan)
        workloads = {}
        for workload_plan in plan.workloads:
            workload = _Workload(plan=workload_plan)
            state = saved["instances"].get(workload_plan.name)
            if state is not None:
                instance = _Instance(
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
                )
                log = base64.b64decode(state["log"])
                if log:
                    instance.log.write(instance.started_at, log)
                if not instance.running:
                    instance.log.close()
                workload.instance = instance
            workloads[workload_plan.name] = workload
        fake._bundles[plan.bundle_id] = _Bundle(plan=plan, workloads=workloads)  # noqa: SLF001
    for saved in data["volumes"]:
        request = structure(saved["request"], VolumeRequest)
        files = {p: base64.b64decode(c) for p, c in saved["files"].items()}
        fake._volumes[request.volume_id] = _Volume(request=request, files=files)  # noqa: SLF001
    for saved in data["edges"]:
        plan_edge = structure(saved, EdgePlan)
        fake._edges[plan_edge.name] = _Edge(plan=plan_edge)  # noqa: SLF001
    return text
