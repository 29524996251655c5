"""The conformance kit's hooks on the local control plane (kwok), for one cluster or several.

A hook about a workload acts on the cluster that holds it: the single-cluster adapter's one, or
the member a multi-cluster adapter has placed the bundle on. The cache hooks act on every
cluster the adapter reaches: each is behind a Toxiproxy proxy of the adapter's own, disabled to
cut the adapter off (its watches end, its probes are refused) while the API server carries on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._multi import MultiClusterAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import AdapterUnavailable, MembershipSettings, RuntimeAdapter, WorkloadRef
from pando_runtime.testing.conformance import ConformanceHarness

EXIT_CODE = "test.pando.dev/exit-code"
CACHE_HOOKS = ("cache_goes_stale", "cache_recovers", "runtime_hangs", "runtime_answers")
HANG_TOXICS = ("hang_downstream", "hang_upstream")
"""Toxiproxy ``timeout`` toxics of no timeout: every byte dropped, each way, connections open."""
STALE_MARGIN = 15.0
"""Seconds past the adapter's ``cache_max_staleness`` within which its cache must refuse."""


@dataclass(frozen=True)
class ClusterHooks:
    """What the harness needs of one cluster: an admin client and the fake pods' log file.

    ``proxy``: the ``ProxiedApiServer`` the adapter reaches this cluster through, if it does
    (the cache hooks need one for every cluster).
    """

    admin_api: Any
    logs_file: Path
    proxy: Any = None


class KubeHarness(ConformanceHarness):
    """Hooks of the kwok cluster: exit codes by annotation, logs from the shared file.

    ``clusters``: the hooks of each cluster by member name (the single-cluster adapter's
    under ``None``).
    """

    image = "registry.example/conformance/app:1"
    timeout = 30.0
    poll_interval = 0.1
    quiet_period = 1.0

    def __init__(self, clusters: Mapping[str | None, ClusterHooks]) -> None:
        self.clusters = dict(clusters)

    def can(self, hook: str) -> bool:
        """The cache hooks only where the adapter reaches every cluster through a proxy."""
        if hook in CACHE_HOOKS:
            proxied = all(h.proxy is not None for h in self.clusters.values())
            return proxied and super().can(hook)
        return super().can(hook)

    def _members(self, adapter: RuntimeAdapter) -> list[KubernetesAdapter]:
        if isinstance(adapter, KubernetesAdapter):
            return [adapter]
        assert isinstance(adapter, MultiClusterAdapter)
        return list(adapter.members.values())

    async def _set_proxies(self, *, enabled: bool) -> None:
        for hooks in self.clusters.values():
            proxied = hooks.proxy
            assert proxied is not None, "a cache hook without a proxy (see can())"
            await anyio.to_thread.run_sync(
                lambda p=proxied: p.toxiproxy.set_enabled(p.proxy.name, enabled)
            )

    async def cache_goes_stale(self, adapter: RuntimeAdapter) -> None:
        """Cut the adapter off every API server, and wait until each member's cache refuses.

        Refuses as ``observe`` does: unconfirmed past ``cache_max_staleness`` while the API
        server does not answer the cache's probe (:class:`AdapterUnavailable`).
        """
        await self._set_proxies(enabled=False)
        for member in self._members(adapter):
            bound = member.config.cache_max_staleness + STALE_MARGIN
            with anyio.fail_after(bound):
                while not await _refuses(member):  # noqa: ASYNC110 - no event says so
                    await anyio.sleep(0.1)

    async def cache_recovers(self, adapter: RuntimeAdapter) -> None:
        """Let the adapter reach its API servers again (the kit waits for observe to answer)."""
        await self._set_proxies(enabled=True)

    async def runtime_hangs(self, adapter: RuntimeAdapter) -> None:
        """Every API server behind a link that drops every byte: as a partition (or a paused
        server), connections stay open and nothing answers."""
        for hooks in self.clusters.values():
            for name in HANG_TOXICS:
                stream = name.removeprefix("hang_")
                await anyio.to_thread.run_sync(
                    lambda p=hooks.proxy, n=name, s=stream: p.toxiproxy.add_toxic(
                        p.proxy.name, "timeout", name=n, stream=s, timeout=0
                    )
                )

    async def runtime_answers(self, adapter: RuntimeAdapter) -> None:
        """The links pass bytes again (a no-op where none was dropping)."""
        for hooks in self.clusters.values():
            present = await anyio.to_thread.run_sync(
                lambda p=hooks.proxy: {t["name"] for t in p.toxiproxy.toxics(p.proxy.name)}
            )
            for name in HANG_TOXICS:
                if name in present:
                    await anyio.to_thread.run_sync(
                        lambda p=hooks.proxy, n=name: p.toxiproxy.remove_toxic(p.proxy.name, n)
                    )

    async def _where(
        self, adapter: RuntimeAdapter, bundle_id: str
    ) -> tuple[KubernetesAdapter, ClusterHooks]:
        if isinstance(adapter, KubernetesAdapter):
            return adapter, self.clusters[None]
        assert isinstance(adapter, MultiClusterAdapter)
        name = await adapter.locate(bundle_id)
        assert name is not None, f"bundle {bundle_id} is on no cluster"
        return adapter.members[name], self.clusters[name]

    async def _newest_pod(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> tuple[str, Any]:
        member, hooks = await self._where(adapter, ref.bundle_id)
        pods = [
            p
            for p in await member.session.reads.pods(namespace_for(ref.bundle_id))
            if p.workload == ref.workload
        ]
        return max(pods, key=lambda p: p.created).name, hooks.admin_api

    async def end_workload(self, adapter: RuntimeAdapter, ref: WorkloadRef, exit_code: int) -> None:
        from kubernetes import client  # noqa: PLC0415

        name, admin_api = await self._newest_pod(adapter, ref)
        core = client.CoreV1Api(admin_api)
        body = {"metadata": {"annotations": {EXIT_CODE: str(exit_code)}}}
        await anyio.to_thread.run_sync(
            lambda: core.patch_namespaced_pod(name, namespace_for(ref.bundle_id), body)
        )

    async def oom_kill(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        from kubernetes import client  # noqa: PLC0415

        name, admin_api = await self._newest_pod(adapter, ref)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": ref.workload,
                        "image": self.image,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 137,
                                "reason": "OOMKilled",
                                "startedAt": now,
                                "finishedAt": now,
                            }
                        },
                    }
                ],
            }
        }
        core = client.CoreV1Api(admin_api)
        await anyio.to_thread.run_sync(
            lambda: core.patch_namespaced_pod_status(name, namespace_for(ref.bundle_id), status)
        )

    async def write_log(self, adapter: RuntimeAdapter, ref: WorkloadRef, data: bytes) -> None:
        from localcluster import cri_log_line  # noqa: PLC0415

        _, hooks = await self._where(adapter, ref.bundle_id)
        lines = [cri_log_line(line) for line in data.decode().splitlines()]
        with hooks.logs_file.open("a") as log:
            log.writelines(lines)

    def echo_stdin_command(self) -> tuple[str, ...]:
        # kwok runs exec on this machine and never closes the command's stdin pipe (its
        # io.Copy into cmd.StdinPipe() is not followed by a Close: pkg/utils/exec/exec.go,
        # v0.8.0), so the end-of-file the adapter sends (v5 close frame, see test_units)
        # cannot reach a command here: copy stdin for 3 s instead of until end-of-file.
        return ("sh", "-c", "timeout 3 cat; exit 0")

    async def cause_event_gap(self, adapter: RuntimeAdapter) -> None:
        if isinstance(adapter, KubernetesAdapter):
            adapter.session.cache.force_relist()
            return
        # A gap in one member's stream, the one that holds none of the test's bundles: the
        # merged stream must still report it.
        assert isinstance(adapter, MultiClusterAdapter)
        others = [m for n, m in adapter.members.items() if n != adapter.default_cluster]
        (others or list(adapter.members.values()))[0].session.cache.force_relist()


async def _refuses(member: KubernetesAdapter) -> bool:
    """Whether the member's cache refuses to answer, as ``observe`` would find it."""
    try:
        await member.session.cache.synced()
    except AdapterUnavailable as error:
        return "confirmed_at" in error.details
    return False


MEMBERSHIP_SETTINGS = MembershipSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.25)
"""Short lease timings for the membership tests (the lease waits dominate them)."""


async def until(check: Callable[[], bool]) -> None:
    """Wait (up to 30 s, a bound that only catches a hang) until ``check()`` holds."""
    with anyio.fail_after(30):
        while True:
            if check():
                return
            await anyio.sleep(MEMBERSHIP_SETTINGS.retry_period)


class ReplicaHarness(KubeHarness):
    """The kwok harness, and another adapter made as the first was, as a second replica."""

    membership_settings = MEMBERSHIP_SETTINGS

    def __init__(
        self, clusters: Mapping[str | None, ClusterHooks], make: Callable[[], RuntimeAdapter]
    ) -> None:
        super().__init__(clusters)
        self.make = make

    @contextlib.asynccontextmanager
    async def replica(self, adapter: RuntimeAdapter) -> AsyncIterator[RuntimeAdapter]:
        async with self.make() as other:
            yield other
