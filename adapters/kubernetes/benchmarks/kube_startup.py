"""Benchmark: what a host pays to start on Kubernetes, against the client's own import and the fake.

    python adapters/kubernetes/benchmarks/kube_startup.py [--runs 7] [--cli-runs 5]

Import times: the best of ``--runs`` fresh interpreters per snippet (bytecode cached, as installed
packages have it), the snippets taking turns so that the machine's other load falls on all alike,
an empty interpreter's subtracted, in wall and in CPU seconds (the steadier on a loaded machine):
``import kubernetes.client`` (the official client, which the adapter uses for configuration,
authentication and serialising parameters), the adapter's package, its public classes, and the
first cluster (a kubeconfig loaded and a transport made: the client comes in here).

Then the command line's ``observe`` of one running app, each a fresh process timed from its
start to its exit (best of ``--cli-runs``): on the local control plane
(tests/support/localcluster, started here) against the fake adapter (its state file), in wall
and CPU seconds, beside an empty interpreter's; and how much of the Kubernetes observe its
imports are (``-X importtime`` at the top level, which itself slows them a little).
Prints figures; asserts only that each observe answered.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
APP = "startup-bench"
BUNDLE = f"""
bundle_id: {APP}
workloads:
  - name: web
    image: registry.example/bench/app:1
    resources: {{cpu_millis: 10, memory_bytes: 16777216}}
"""
KUBECONFIG_STUB = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""
"""A kubeconfig nobody is asked through: loading it and making a transport sends nothing."""


def imports(kubeconfig: str) -> dict[str, str]:
    """The snippets timed, by name."""
    return {
        "import kubernetes.client": "import kubernetes.client",
        "import pando_runtime_kubernetes": "import pando_runtime_kubernetes",
        "from pando_runtime_kubernetes import KubernetesAdapter": (
            "from pando_runtime_kubernetes import KubernetesAdapter"
        ),
        "every public name of pando_runtime_kubernetes": (
            "import pando_runtime_kubernetes as pk\nfor n in pk.__all__: getattr(pk, n)"
        ),
        "KubernetesAdapter + the first cluster (kubeconfig, transport)": (
            "from pando_runtime_kubernetes import Cluster, KubernetesAdapter, KubeTransport\n"
            f"KubeTransport.for_cluster(Cluster.load({kubeconfig!r})).close()"
        ),
    }


CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Children cache their bytecode, as an installed package has it: compiling the sources again in
every process would be most of what is measured."""


def timed(argv: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds (user and system) of one process, start to exit, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=CHILD_ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} failed:\n{result.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result.stdout


def best_times(snippets: dict[str, str], runs: int) -> dict[str, tuple[float, float]]:
    """Best wall and CPU seconds of each snippet in a fresh interpreter, an empty one's taken off.

    CPU seconds are the steadier figure on a loaded machine: waiting for a core is not in them.
    """
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in ("pass", *snippets)}
    for code in snippets.values():  # a first run writes the bytecode caches
        timed([sys.executable, "-c", code])
    for _ in range(runs):
        for name, code in (("pass", "pass"), *snippets.items()):
            wall, cpu, _ = timed([sys.executable, "-c", code])
            samples[name].append((wall, cpu))
    base = samples.pop("pass")
    wall0, cpu0 = min(w for w, _ in base), min(c for _, c in base)
    return {
        name: (min(w for w, _ in times) - wall0, min(c for _, c in times) - cpu0)
        for name, times in samples.items()
    }


def cli(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``pando-runtime`` process; it must show the app's workload."""
    wall, cpu, out = timed([sys.executable, "-m", "pando_runtime", *args])
    assert "web" in out, out
    return wall, cpu


def import_seconds(args: list[str]) -> float:
    """Seconds the imports of one ``pando-runtime`` process took (``-X importtime``)."""
    argv = [sys.executable, "-X", "importtime", "-m", "pando_runtime", *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=True, env=CHILD_ENV)
    total = 0
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if cumulative.strip().isdigit() and not name[1:].startswith(" "):  # top level only
            total += int(cumulative)
    return total / 1e6


def cli_figures(runs: int, work: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from localcluster import LocalCluster  # noqa: PLC0415

    bundle = work / "bundle.yaml"
    bundle.write_text(BUNDLE)
    fake = ["--set", f"state_file={work / 'fake.json'}"]
    cli([*fake, "apply", str(bundle)])
    with LocalCluster() as cluster:
        kube = [
            "--adapter",
            "kubernetes",
            "--set",
            f"kubeconfig={cluster.kubeconfig}",
            "--set",
            "trust_network_policy=true",
        ]
        cli([*kube, "apply", str(bundle)])
        fake_s, kube_s, empty_s = [], [], []
        for _ in range(runs):  # taking turns, as the imports do
            fake_s.append(cli([*fake, "observe", APP]))
            kube_s.append(cli([*kube, "observe", APP]))
            empty_s.append(timed([sys.executable, "-c", "pass"])[:2])
        kube_imports = min(import_seconds([*kube, "observe", APP]) for _ in range(3))
    for label, samples in (("wall", 0), ("CPU", 1)):
        fake_best = min(s[samples] for s in fake_s)
        kube_best = min(s[samples] for s in kube_s)
        empty = min(s[samples] for s in empty_s)
        print(
            f"pando-runtime observe, {label} seconds (best of {runs}): fake {fake_best:.3f} s, "
            f"kubernetes {kube_best:.3f} s, {kube_best / fake_best:.2f}x the fake's "
            f"(target at most 2.5x); an empty interpreter {empty:.3f} s"
        )
    print(
        f"  kubernetes observe's imports: {kube_imports:.3f} s (-X importtime, top level, best "
        "of 3; the rest is the interpreter, the kubeconfig, the API calls and the answer)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per import")
    parser.add_argument("--cli-runs", type=int, default=5, help="observe processes each")
    parser.add_argument("--no-cluster", action="store_true", help="import times only")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kube-startup-")))
        kubeconfig = work / "stub-kubeconfig"
        kubeconfig.write_text(KUBECONFIG_STUB)
        times = best_times(imports(str(kubeconfig)), args.runs)
        for name, (wall, cpu) in times.items():
            print(f"{name}: {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU")
        client = times["import kubernetes.client"]
        adapter = times["from pando_runtime_kubernetes import KubernetesAdapter"]
        print(
            f"KubernetesAdapter / import kubernetes.client: {adapter[0] / client[0]:.2f} wall, "
            f"{adapter[1] / client[1]:.2f} CPU (target at most 1; best of {args.runs} fresh "
            "interpreters each, an empty interpreter's taken off)"
        )
        if not args.no_cluster:
            cli_figures(args.cli_runs, work)


if __name__ == "__main__":
    main()
