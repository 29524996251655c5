"""The conformance kit's hooks on the real node: real containers, driven from inside.

The workload is the harness's busybox image running :data:`MAIN`, a shell as PID 1 that
sleeps until a signal tells it what to do. The hooks act through the adapter's own ``exec``
(``adapter.run``), as a host's operator would:

- ``end_workload``: writes the wanted exit code to a file, then signals PID 1 (``USR1``),
  whose trap exits with that code;
- ``write_log``: writes to PID 1's standard output (``/proc/1/fd/1``), then waits until the
  kubelet serves the lines in the pod's log (read with the admin identity);
- ``oom_kill``: the kernel's OOM killer, for real. The kit's plan sets no memory limit, so the
  harness sets one on the container's memory cgroup (v1) from this machine, where the node
  runs, then signals PID 1 (``USR2``), which replaces itself with ``dd`` filling a buffer
  beyond it. On cgroup v1 the OOM killer ends one process, the one using the most memory: PID
  1 itself, as the main process must be for the runtime to report the container OOM-killed;
- ``unpullable_image``: a reference to the adapter's image registry (the cluster's own, which
  the node pulls from with the app's credentials) that names no image there;
- ``cause_event_gap``: the adapter relists (as the kwok harness does);
- the cache hooks: the adapter reaches the API server through a Toxiproxy proxy of its own,
  disabled to cut it off (see :mod:`_kube_harness`).

``TERM`` (stop, destroy) ends PID 1 at once, so nothing waits out a grace period.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from _kube_harness import CACHE_HOOKS, STALE_MARGIN, _refuses
from _real import connects_from_async
from localcluster import images
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

from pando_runtime import ExecRequest, Port, RuntimeAdapter, WorkloadPlan, WorkloadRef
from pando_runtime.testing.conformance import ConformanceHarness

EXIT_FILE = "/tmp/pando-exit-code"  # noqa: S108 - a file inside the container
MAIN = (
    "trap 'exit 143' TERM; "
    f"trap 'exit \"$(cat {EXIT_FILE})\"' USR1; "
    "trap 'exec dd if=/dev/zero of=/dev/null bs=96M count=1' USR2; "
    # A trap runs once the foreground command returns: wait returns on a signal, sleep not.
    "while :; do sleep 3600 & wait $!; done"
)
"""PID 1 of every workload: silent (the log holds only what the hooks write) until signalled."""
SLOW_STOP_SECONDS = 6
SLOW_STOP_PORT = 8080
SLOW_STOP = (
    f"mkdir -p /tmp/w && echo ok-slow > /tmp/w/index.html && httpd -p {SLOW_STOP_PORT} -h /tmp/w; "
    f"trap 'sleep {SLOW_STOP_SECONDS}; exit 0' TERM; "
    "while :; do sleep 3600 & wait $!; done"
)
"""PID 1 of the slow-stopping workload: serves HTTP, and on SIGTERM keeps serving for
``SLOW_STOP_SECONDS`` before it exits (an app finishing its requests; the pod's grace period
is 30 s)."""
OOM_LIMIT = 32 * 1024 * 1024
"""The memory limit the OOM hook sets: well above the shell's use, a third of dd's buffer."""
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")


class RealNodeHarness(ConformanceHarness):
    """Hooks of the real node (see the module docstring).

    ``admin_api``: an admin client of the cluster (to read pods and their logs);
    ``cgroup_root``: the node's cgroup root on this machine (``None``: no OOM hook);
    ``proxy``: the ``ProxiedApiServer`` the adapter reaches the API server through, if any
    (``None``: no cache hooks).
    """

    image = images.WORKLOAD
    command = ("sh", "-c", MAIN)

    def __init__(
        self,
        admin_api: Any,
        cgroup_root: str | None,
        proxy: Any = None,
        node_netns: str | None = None,
    ) -> None:
        self.admin_api = admin_api
        self.cgroup_root = cgroup_root
        self.proxy = proxy
        self.node_netns = node_netns
        self._addresses: dict[str, str] = {}  # pod uid -> pod IP, kept once seen

    def can(self, hook: str) -> bool:
        """The cache hooks only through a proxy; the OOM hook only where the cgroups are."""
        if hook in CACHE_HOOKS:  # those of them this harness has (no hang hooks here)
            return self.proxy is not None and super().can(hook)
        if hook == "oom_kill":
            return self.cgroup_root is not None
        if hook == "instance_runs":
            return self.node_netns is not None
        return super().can(hook)

    # -- a slow-stopping app, probed from the node ----------------------------------------

    async def slow_stop_workload(self, adapter: RuntimeAdapter, name: str) -> WorkloadPlan:
        return WorkloadPlan(
            name=name, image=self.image, command=("sh", "-c", SLOW_STOP), ports=(Port(8080),)
        )

    async def instance_runs(
        self, adapter: RuntimeAdapter, ref: WorkloadRef, instance_id: str
    ) -> bool:
        """Whether the pod ``instance_id`` (its uid) still answers HTTP on its IP, from the node.

        The pod's IP is read with the admin identity while the pod exists and kept: a pod the
        API server no longer has was confirmed ended by its kubelet.
        """
        assert self.node_netns is not None, "a probe without the node (see can())"
        address = self._addresses.get(instance_id) or await self._pod_ip(ref, instance_id)
        if address is None:
            return False
        self._addresses[instance_id] = address
        body = await connects_from_async(self.node_netns, address, SLOW_STOP_PORT)
        return bool(body and body.endswith(b"ok-slow\n"))

    async def _pod_ip(self, ref: WorkloadRef, uid: str) -> str | None:
        from kubernetes import client  # noqa: PLC0415

        core = client.CoreV1Api(self.admin_api)
        ns = namespace_for(ref.bundle_id)
        pods = await anyio.to_thread.run_sync(lambda: core.list_namespaced_pod(ns).items)
        found = [p for p in pods if p.metadata.uid == uid and p.status.pod_ip]
        return str(found[0].status.pod_ip) if found else None

    # -- through the workload's own shell -----------------------------------------------

    async def _sh(self, adapter: RuntimeAdapter, ref: WorkloadRef, script: str, *args: str) -> None:
        done = await adapter.run(ref, ExecRequest(command=("sh", "-c", script, "sh", *args)))
        assert done.exit_code == 0, f"{script!r} in {ref}: {done}"

    async def end_workload(self, adapter: RuntimeAdapter, ref: WorkloadRef, exit_code: int) -> None:
        await self._sh(adapter, ref, f'echo "$1" > {EXIT_FILE} && kill -USR1 1', str(exit_code))

    async def write_log(self, adapter: RuntimeAdapter, ref: WorkloadRef, data: bytes) -> None:
        before = await self._log(adapter, ref)
        await self._sh(adapter, ref, 'printf %s "$1" > /proc/1/fd/1', data.decode())
        with anyio.fail_after(self.timeout):
            while not (await self._log(adapter, ref)).startswith(before + data):  # noqa: ASYNC110
                await anyio.sleep(0.1)  # the kubelet serves the file; no event says so

    async def oom_kill(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        assert self.cgroup_root is not None, "an OOM hook without cgroups (see can())"
        pod = await self._pod(adapter, ref)
        container = next(s for s in pod.status.container_statuses if s.name == ref.workload)
        cgroup = await anyio.to_thread.run_sync(
            _container_cgroup, self.cgroup_root, container.container_id.split("://", 1)[-1]
        )
        await anyio.to_thread.run_sync(_limit_memory, cgroup, OOM_LIMIT)
        await self._sh(adapter, ref, "kill -USR2 1")

    async def unpullable_image(self, adapter: RuntimeAdapter) -> str:
        assert isinstance(adapter, KubernetesAdapter)
        registry = adapter.config.image_registry
        assert registry is not None, "the real-node settings name the cluster's registry"
        return f"{registry}/conformance/absent-{uuid.uuid4().hex[:8]}:1"

    async def cause_event_gap(self, adapter: RuntimeAdapter) -> None:
        assert isinstance(adapter, KubernetesAdapter)
        adapter.session.cache.force_relist()

    # -- the cache, through the proxy ---------------------------------------------------

    async def _set_proxy(self, *, enabled: bool) -> None:
        proxied = self.proxy
        assert proxied is not None, "a cache hook without a proxy (see can())"
        await anyio.to_thread.run_sync(
            lambda: proxied.toxiproxy.set_enabled(proxied.proxy.name, enabled)
        )

    async def cache_goes_stale(self, adapter: RuntimeAdapter) -> None:
        """Cut the adapter off the API server; wait until its cache refuses to answer."""
        assert isinstance(adapter, KubernetesAdapter)
        await self._set_proxy(enabled=False)
        with anyio.fail_after(adapter.config.cache_max_staleness + STALE_MARGIN):
            while not await _refuses(adapter):  # noqa: ASYNC110 - no event says so
                await anyio.sleep(0.1)

    async def cache_recovers(self, adapter: RuntimeAdapter) -> None:
        await self._set_proxy(enabled=True)

    # -- with the admin identity --------------------------------------------------------

    async def _pod(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> Any:
        """The workload's newest pod, as the API server has it now."""
        from kubernetes import client  # noqa: PLC0415

        assert isinstance(adapter, KubernetesAdapter)
        ns = namespace_for(ref.bundle_id)
        pods = [p for p in await adapter.session.reads.pods(ns) if p.workload == ref.workload]
        name = max(pods, key=lambda p: p.created).name
        core = client.CoreV1Api(self.admin_api)
        return await anyio.to_thread.run_sync(lambda: core.read_namespaced_pod(name, ns))

    async def _log(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> bytes:
        from kubernetes import client  # noqa: PLC0415

        pod = await self._pod(adapter, ref)
        core = client.CoreV1Api(self.admin_api)
        text = await anyio.to_thread.run_sync(
            lambda: core.read_namespaced_pod_log(
                pod.metadata.name, pod.metadata.namespace, container=ref.workload
            )
        )
        return str(text).encode()


def _container_cgroup(cgroup_root: str, container_id: str) -> Path:
    """The container's memory cgroup on this machine (kubelet's cgroupfs layout, under the
    node's root: ``kubepods/<class>/pod<uid>/<container id>``)."""
    found = [p for p in (CGROUP_MEMORY / cgroup_root.strip("/")).rglob(container_id) if p.is_dir()]
    assert len(found) == 1, f"the memory cgroup of container {container_id}: {found}"
    return found[0]


def _limit_memory(cgroup: Path, limit: int) -> None:
    """Cap the cgroup's memory (and memory with swap, where accounted) at ``limit`` bytes."""
    (cgroup / "memory.limit_in_bytes").write_text(str(limit))
    memsw = cgroup / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        memsw.write_text(str(limit))
