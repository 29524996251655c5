"""Benchmark: what a host pays to start on Kubernetes, against the client's own import and the fake.

    python adapters/kubernetes/benchmarks/kube_startup.py [--runs 7] [--cli-runs 5]

Import times: the best of ``--runs`` fresh interpreters per snippet, the snippets taking turns
so that the machine's other load falls on all alike, an empty interpreter's start subtracted:
``import kubernetes.client`` (the official client, which the adapter uses for configuration,
authentication and serialising parameters), the adapter's package, its public classes, and the
first cluster (a kubeconfig loaded and a transport made: the client comes in here).

Then the command line's ``observe`` of one running app, each a fresh process timed from its
start to its exit (best of ``--cli-runs``): on the local control plane
(tests/support/localcluster, started here) against the fake adapter (its state file). The
Kubernetes figure is split the same way: interpreter, imports (what ``-X importtime`` would
show at the top level), and the rest (the kubeconfig, the API calls, the answer).
Prints figures; asserts only that each observe answered.
"""

from __future__ import annotations

import argparse
import contextlib
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


def best_times(snippets: dict[str, str], runs: int) -> dict[str, float]:
    """Best seconds of each snippet in a fresh interpreter, the best empty start subtracted."""
    samples: dict[str, list[float]] = {name: [] for name in ("pass", *snippets)}
    for _ in range(runs):
        for name, code in (("pass", "pass"), *snippets.items()):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            samples[name].append(time.perf_counter() - start)
    base = min(samples.pop("pass"))
    return {name: min(times) - base for name, times in samples.items()}


def cli(args: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds of one ``pando-runtime`` process, start to exit; it must succeed."""
    argv = [sys.executable, "-m", "pando_runtime", *args]
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{result.stderr[-2000:]}")
    assert APP in result.stdout, result.stdout
    return seconds


def import_seconds(args: list[str]) -> float:
    """Seconds the imports of one ``pando-runtime`` process took (``-X importtime``)."""
    argv = [sys.executable, "-X", "importtime", "-m", "pando_runtime", *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=True)
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
        fake_s, kube_s = [], []
        for _ in range(runs):  # taking turns, as the imports do
            fake_s.append(cli([*fake, "observe", APP]))
            kube_s.append(cli([*kube, "observe", APP]))
        kube_imports = min(import_seconds([*kube, "observe", APP]) for _ in range(3))
        start = min(_timed([sys.executable, "-c", "pass"]) for _ in range(runs))
    fake_best, kube_best = min(fake_s), min(kube_s)
    print(f"pando-runtime observe, fake:       {fake_best:.3f} s (best of {runs})")
    print(
        f"pando-runtime observe, kubernetes: {kube_best:.3f} s (best of {runs}): "
        f"{kube_best / fake_best:.2f}x the fake's (target at most 2.5x)"
    )
    print(
        f"  of which: interpreter {start:.3f} s, imports {kube_imports:.3f} s (-X importtime, "
        f"best of 3), the rest (kubeconfig, API calls, answer) "
        f"{max(0.0, kube_best - start - kube_imports):.3f} s"
    )


def _timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - start


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
        for name, seconds in times.items():
            print(f"{name}: {seconds * 1000:.0f} ms")
        client = times["import kubernetes.client"]
        adapter = times["from pando_runtime_kubernetes import KubernetesAdapter"]
        print(
            f"KubernetesAdapter / import kubernetes.client: {adapter / client:.2f} (target at "
            f"most 1; best of {args.runs} fresh interpreters each, interpreter start subtracted)"
        )
        if not args.no_cluster:
            cli_figures(args.cli_runs, work)


if __name__ == "__main__":
    main()
