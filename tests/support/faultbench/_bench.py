"""The bench: a local control plane of its own, Toxiproxy in front of its API server, the
adapter's identity granted, and what the scenarios check on the cluster afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from kubeadmin import admin_client, grant_adapter
from localcluster import RESTARTABLE, LocalCluster, ProxiedApiServer

from pando_runtime import BundlePlan, WorkloadPlan

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

MANAGED = "app.kubernetes.io%2Fmanaged-by%3Dpando"
WORKLOAD_LABEL = "pando.dev/workload"
ROLE_LABEL = "pando.dev/role"


def app_plan(bundle_id: str, version: int = 1) -> BundlePlan:
    """A two-workload app; ``version`` changes what ``api`` runs (a replacement)."""
    return BundlePlan(
        bundle_id=bundle_id,
        workloads=(
            WorkloadPlan(name="api", image=f"registry.example/api:{version}"),
            WorkloadPlan(name="worker", image="registry.example/worker:1"),
        ),
    )


class FaultBench:
    """What every scenario runs on, for the duration of a ``with`` block."""

    def __init__(self, cluster: LocalCluster, proxy: ProxiedApiServer) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self._exit = contextlib.ExitStack()
        self._admin: ApiClient | None = None

    def __enter__(self) -> Self:
        with self._exit as stack:
            self._admin = stack.enter_context(admin_client(self.cluster.kubeconfig))
            grant_adapter(self._admin, self.cluster.restricted_user)
            self._exit = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._exit.close()
        self._admin = None

    @property
    def admin(self) -> ApiClient:
        """An admin ``kubernetes.client.ApiClient`` (direct, not through the proxy)."""
        if self._admin is None:
            raise RuntimeError("the bench is not entered")
        return self._admin

    @staticmethod
    def new_id(prefix: str) -> str:
        """A fresh bundle id: ``prefix-`` and 8 hex digits."""
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    @staticmethod
    def run_prefix(scenario: str) -> str:
        """A prefix of bundle ids for one run of a scenario (its audit looks at those only)."""
        return f"{scenario}{uuid.uuid4().hex[:4]}"

    def settings(self, *, proxied: bool = True, **overrides: Any) -> dict[str, Any]:
        """Adapter settings as the restricted identity, with short timeouts for faults."""
        kubeconfig: Path = (
            self.proxy.restricted_kubeconfig if proxied else self.cluster.restricted_kubeconfig
        )
        settings: dict[str, Any] = {
            "kubeconfig": str(kubeconfig),
            "app_subject": f"User:{self.cluster.restricted_user}",
            "trust_network_policy": True,
            "schedule_wait": 15.0,
            "dependency_wait": 30.0,
            "connect_timeout": 2.0,
            "read_timeout": 5.0,
            "cache_probe_interval": 1.0,
            "cache_max_staleness": 5.0,
        }
        settings.update(overrides)
        return settings

    def heal(self) -> None:
        """Every component running and healthy, every toxic gone, the proxy enabled."""
        for name in RESTARTABLE:
            component = self.cluster.component(name)
            component.resume()
            if not component.running():
                component.start()
        for name in RESTARTABLE:
            self.cluster.wait_healthy(name)
        self.proxy.toxiproxy.reset()

    # -- what is on the cluster --------------------------------------------------------------

    def managed_pods(self) -> list[dict[str, Any]]:
        """Every managed pod, from the API server directly."""
        status, body = self.cluster.rest.request(
            "GET", f"/api/v1/pods?labelSelector={MANAGED}", timeout=30
        )
        if status != 200:
            raise RuntimeError(f"listing pods failed: HTTP {status}: {body}")
        return list(body.get("items") or ())

    def managed_namespaces(self) -> set[str]:
        """The names of every managed namespace that is not being deleted."""
        status, body = self.cluster.rest.request(
            "GET", f"/api/v1/namespaces?labelSelector={MANAGED}", timeout=30
        )
        if status != 200:
            raise RuntimeError(f"listing namespaces failed: HTTP {status}: {body}")
        return {
            item["metadata"]["name"]
            for item in body.get("items") or ()
            if not item["metadata"].get("deletionTimestamp")
        }

    def audit(self, expected: dict[str, BundlePlan], prefix: str) -> tuple[int, int]:
        """(duplicates, orphans) among the namespaces named ``prefix*``, given the plans
        applied by namespace.

        A duplicate is a workload with more than one live pod; an orphan is a live managed
        pod of a namespace or workload that no plan names, or a managed namespace that no
        plan names. Other namespaces (other scenarios') are not looked at.
        """
        live: Counter[tuple[str, str]] = Counter()
        orphans = 0
        for pod in self.managed_pods():
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or not meta["namespace"].startswith(prefix):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            labels = meta.get("labels") or {}
            workload = labels.get(WORKLOAD_LABEL)
            if workload is None or ROLE_LABEL in labels:
                continue  # a helper pod (volumes, trials, canary), not a workload's
            plan = expected.get(meta["namespace"])
            if plan is None or workload not in {w.name for w in plan.workloads}:
                orphans += 1
                continue
            live[meta["namespace"], workload] += 1
        duplicates = sum(1 for n in live.values() if n > 1)
        mine = {ns for ns in self.managed_namespaces() if ns.startswith(prefix)}
        orphans += len(mine - set(expected))
        return duplicates, orphans
