"""Fault report: the fault scenarios of the tests, at a larger count, as a table.

    python benchmarks/faults.py [--rounds 5] [--apps 10] [--resets 20] [--json FILE]

Starts a local control plane of its own (tests/support/localcluster) with Toxiproxy in front
of its API server, runs each scenario of ``tests/support/faultbench`` with a Kubernetes
adapter as a restricted identity, and prints one row per scenario: rounds, errors by code,
retries, recovery time p50/p99 (from the end of a fault to every apply succeeding again),
duplicate pods, orphans and lost transitions, then what each scenario measured besides.
It asserts nothing about time; it exits non-zero when a scenario broke a promise (an uncoded
error, a duplicate, an orphan, a lost transition).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from faultbench import (  # noqa: E402 - after the path of the test support packages
    HEADER,
    FaultBench,
    ScenarioResult,
    component_restarted,
    latency_and_hang,
    throttled,
    watch_resets,
)
from localcluster import LocalCluster, ToxiproxyServer, proxy_apiserver  # noqa: E402


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


async def _run(bench: FaultBench, args: argparse.Namespace) -> list[ScenarioResult]:
    results = []
    plan: list[Callable[[], Awaitable[ScenarioResult]]] = [
        lambda: component_restarted(
            bench, component="kube-apiserver", rounds=args.rounds, apps=args.apps
        ),
        lambda: component_restarted(
            bench,
            component="etcd",
            rounds=args.rounds,
            apps=args.apps,
            name="etcd restarted under load",
        ),
        lambda: watch_resets(bench, resets=args.resets, apps=max(2, args.apps // 2)),
        lambda: latency_and_hang(bench, rounds=args.rounds),
        lambda: throttled(bench, apps=args.apps * 2),
    ]
    for scenario in plan:
        began = time.monotonic()
        bench.heal()
        result = await scenario()
        result.extra["seconds"] = round(time.monotonic() - began, 1)
        print(f"  {result.name}: done in {result.extra['seconds']} s", file=sys.stderr)
        results.append(result)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="faults per kill/latency scenario")
    parser.add_argument("--apps", type=int, default=10, help="apps applied in each round")
    parser.add_argument("--resets", type=int, default=20, help="connection cuts")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    started = time.monotonic()
    with (
        LocalCluster() as cluster,
        ToxiproxyServer(log_dir=cluster.logs_dir) as server,
        FaultBench(cluster, proxy_apiserver(cluster, server)) as bench,
    ):
        results = anyio.run(_run, bench, args)
    print(_table([HEADER, *(r.row() for r in results)]))
    print()
    for result in results:
        extra = ", ".join(f"{k}: {v}" for k, v in result.extra.items())
        print(f"{result.name}: {extra}")
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "scenario": r.name,
                        "rounds": r.rounds,
                        "errors": dict(r.errors),
                        "retries": r.retries,
                        "recovery_p50": r.percentile(0.5),
                        "recovery_p99": r.percentile(0.99),
                        "duplicates": r.duplicates,
                        "orphans": r.orphans,
                        "lost": r.lost,
                        "extra": r.extra,
                    }
                    for r in results
                ],
                indent=2,
            )
            + "\n"
        )
    broken = [
        r.name
        for r in results
        if r.uncoded or r.duplicates or r.orphans or r.lost or r.extra.get("disagreements")
    ]
    if broken:
        print(f"promises broken: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
