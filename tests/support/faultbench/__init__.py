"""Fault scenarios on a local control plane: shared by the fault tests and ``benchmarks/faults.py``.

Each scenario drives a real Kubernetes adapter while the harness hurts the control plane
(restarts, pauses, Toxiproxy toxics, API Priority and Fairness) and returns a
:class:`ScenarioResult`: what the tests assert on and what the benchmark prints.
"""

from __future__ import annotations

from ._bench import FaultBench, app_plan
from ._result import HEADER, ScenarioResult
from ._scenarios import component_restarted, flow_counts, latency_and_hang, throttled, watch_resets

__all__ = [
    "HEADER",
    "FaultBench",
    "ScenarioResult",
    "app_plan",
    "component_restarted",
    "flow_counts",
    "latency_and_hang",
    "throttled",
    "watch_resets",
]
