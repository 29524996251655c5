"""What apps use now, from the metrics API (``metrics.k8s.io``) where the cluster serves it.

metrics-server (or another provider of the API) samples each container's CPU and working-set
memory every few seconds. ``usage`` reads one app namespace's pod metrics, ``in_use`` every app
pod's, one API call each. ``reports_usage`` is true when the API is registered: the adapter asks
when it connects (or at the first ``capabilities()`` call), and again at each health check, so a
cluster that gains or loses the API is noticed.

A pod that runs but has no sample yet (a provider needs one or two scrapes after a start) is
reported with -1 for CPU and memory: unknown, not zero.

A change of answer is logged on ``pando_runtime.kubernetes.usage``: INFO when the API is (or is
not) served, WARNING when it is registered but unavailable (503).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP
from http import HTTPStatus
from typing import Any

import anyio

from pando_runtime import (
    BundleRef,
    BundleUsage,
    CapabilityUnsupported,
    InUse,
    NotFound,
    VolumeUsage,
    WorkloadUsage,
)

from .._log import logger
from .._names import LABEL_ROLE, LABEL_WORKLOAD, MANAGED_SELECTOR, namespace_for
from ..cache._capacity import parse_quantity
from ..cache._projections import PodFacts, bundle_workloads
from ..session._session import ClusterSession

__all__ = [
    "APP_PODS_SELECTOR",
    "METRICS_API",
    "Usage",
    "pod_usage",
    "workload_usages",
]

METRICS_API = "/apis/metrics.k8s.io/v1beta1"
APP_PODS_SELECTOR = f"{MANAGED_SELECTOR},{LABEL_WORKLOAD},!{LABEL_ROLE}"
"""The pods of app workloads: not volume helpers, trial observers, canaries or the edge."""
UNKNOWN = -1

_LOG = logger("usage")


def pod_usage(item: Mapping[str, Any]) -> tuple[int, int]:
    """A PodMetrics item's CPU (millicores, rounded) and memory (bytes), summed over containers."""
    cpu = memory = 0
    for container in item.get("containers") or ():
        amounts = container.get("usage") or {}
        cpu += int((parse_quantity(amounts.get("cpu", "0")) * 1000).quantize(1, ROUND_HALF_UP))
        memory += int(parse_quantity(amounts.get("memory", "0")))
    return cpu, memory


def _by_pod(items: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    return {(i.get("metadata") or {}).get("name", ""): pod_usage(i) for i in items}


def workload_usages(
    workloads: Iterable[tuple[str, PodFacts | None]], sampled: Mapping[str, tuple[int, int]]
) -> tuple[WorkloadUsage, ...]:
    """Each workload's use: its running pod's sample, 0 when nothing runs, -1 when not sampled."""
    usages = []
    for name, pod in workloads:
        running = pod is not None and bool(pod.running)
        cpu, memory = (
            sampled.get(pod.name, (UNKNOWN, UNKNOWN)) if pod is not None and running else (0, 0)
        )
        cpu_limit, memory_limit = pod.limits if pod is not None else (None, None)
        usages.append(
            WorkloadUsage(
                workload=name,
                running=running,
                cpu_millis=cpu,
                memory_bytes=memory,
                cpu_limit_millis=cpu_limit,
                memory_limit_bytes=memory_limit,
            )
        )
    return tuple(usages)


class Usage:
    """``usage`` and ``in_use`` on one cluster, and whether it serves the metrics API."""

    def __init__(self, session: ClusterSession) -> None:
        self._session = session
        self._served: bool | None = None
        """Whether ``metrics.k8s.io`` is registered; ``None`` until a definite answer."""
        self._probe_lock = anyio.Lock()
        self._last_status = 0

    async def served(self, *, fresh: bool = False) -> bool:
        """Whether the cluster serves the metrics API (one discovery call, then remembered).

        Registered but unreachable (503) counts as served: reads then say the API is down.
        When the API server gives no such answer, what was known stays (``False`` at first).
        """
        if self._served is not None and not fresh:
            return self._served
        async with self._probe_lock:  # concurrent first callers share one probe
            if self._served is None or fresh:
                await self._ask()
        return bool(self._served)

    async def _ask(self) -> None:
        status = await self._session.api.status_of(METRICS_API)
        if status not in (HTTPStatus.OK, HTTPStatus.NOT_FOUND, HTTPStatus.SERVICE_UNAVAILABLE):
            return  # no answer (or no cluster): capabilities stay data, with no error
        if status == self._last_status:
            return  # said already
        self._last_status = status
        self._served = status != HTTPStatus.NOT_FOUND
        extra = {"cluster": self._session.connection.log_name, "status": status}
        if status == HTTPStatus.OK:
            _LOG.info("the cluster serves the metrics API: usage is reported", extra=extra)
        elif status == HTTPStatus.NOT_FOUND:
            _LOG.info("the cluster serves no metrics API: usage is not reported", extra=extra)
        else:
            _LOG.warning(
                "the metrics API is registered but unavailable (503): usage cannot be read",
                extra=extra,
            )

    async def _require_metrics(self) -> None:
        if not await self.served():
            raise CapabilityUnsupported(
                "reports_usage",
                "this cluster serves no metrics API (metrics.k8s.io), so usage is unknown",
                remedy="Install metrics-server (or another provider of metrics.k8s.io); "
                "the adapter asks again at each health_check.",
            )

    async def _pod_metrics(self, ns: str | None) -> dict[str, tuple[int, int]]:
        path = f"{METRICS_API}/namespaces/{ns}/pods" if ns else f"{METRICS_API}/pods"
        body = await self._session.api.get(
            path,
            f"read pod metrics{f' of {ns}' if ns else ''}",
            labelSelector=APP_PODS_SELECTOR,
        )
        return _by_pod(body.get("items") or ())

    async def usage(self, ref: BundleRef) -> BundleUsage:
        """Each workload's CPU and memory now, with its limits; volumes' bytes are unknown."""
        await self._require_metrics()
        session = self._session
        ns = namespace_for(ref.bundle_id)
        facts = await session.reads.namespace(ns)
        # Volumes kept after a destroy are no deployed bundle (as ``observe`` says).
        if (
            facts is None
            or facts.terminating
            or facts.volumes_only
            or facts.bundle_id != ref.bundle_id
        ):
            raise NotFound(f"no bundle {ref.bundle_id!r}", details={"bundle_id": ref.bundle_id})
        pods = await session.reads.pods(ns)
        sampled = await self._pod_metrics(ns) if any(p.running for p in pods) else {}
        workloads = workload_usages(bundle_workloads(facts, pods), sampled)
        # The metrics API does not measure volumes; the kubelet's summary would, but reading it
        # needs the nodes/proxy permission, which lets a holder reach every kubelet.
        volumes = tuple(
            VolumeUsage(volume_id=c.volume_id, bytes=UNKNOWN)
            for c in sorted(await session.reads.claims(ns), key=lambda c: c.volume_id)
            if not c.deleting
        )
        return BundleUsage(
            bundle_id=ref.bundle_id,
            reported_at=datetime.now(UTC),
            workloads=workloads,
            volumes=volumes,
        )

    async def in_use(self) -> InUse:
        """CPU and memory used now by every app's pods, summed (unsampled pods not counted)."""
        await self._require_metrics()
        sampled = (await self._pod_metrics(None)).values()
        return InUse(
            cpu_millis=sum(cpu for cpu, _ in sampled),
            memory_bytes=sum(memory for _, memory in sampled),
            reported_at=datetime.now(UTC),
        )
