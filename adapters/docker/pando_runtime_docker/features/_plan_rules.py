"""The Docker adapter's own plan rules, checked with the contract's in one pass."""

from __future__ import annotations

from pando_runtime import BundlePlan, Problem

__all__ = ["docker_problems"]


def docker_problems(plan: BundlePlan) -> list[Problem]:
    """What this adapter cannot run in an otherwise good plan, each with its path."""
    problems = []
    for index, workload in enumerate(plan.workloads):
        health = workload.health
        if health is not None and health.http_path is not None:
            problems.append(
                Problem(
                    f"workloads[{index}].health.http_path",
                    "the Docker adapter runs command health checks only (the daemon has no "
                    "HTTP probe); use a command such as ('nc', '-z', '127.0.0.1', '8080')",
                    "unsupported_health_check",
                )
            )
    return problems
