"""The conformance kit's hooks on a real Docker Engine, through the ``docker`` command.

The hooks act on the containers themselves, never through the adapter under test: the
workload's shell (``WORKLOAD_SCRIPT``) ends with the code written to a file, turns into a
memory hog once another file appears (a real kernel OOM kill under a limit the harness sets
with ``docker update``), and what the harness writes to its PID 1's stdout is its log.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
from _socket_proxy import SocketProxy

from pando_runtime import AdapterUnavailable, BundleRef, RuntimeAdapter, WorkloadPlan, WorkloadRef
from pando_runtime.testing.conformance import ConformanceHarness, HarnessCannot

REMOVALS_AT_ONCE = 8
"""Containers, networks or volumes a test's cleanup removes at once."""

BUSYBOX = "pando.test/busybox:1"

WORKLOAD_SCRIPT = (
    "trap 'exit 143' TERM; "
    "while :; do "
    "if [ -f /pando-oom ]; then x=0123456789abcdef; while :; do x=$x$x; done; fi; "
    'if [ -f /pando-exit ]; then exit "$(cat /pando-exit)"; fi; '
    "sleep 0.1; "
    "done"
)
"""PID 1 of every harness workload: runs until told to exit (or to eat memory)."""

SLOW_STOP_SECONDS = 5
SLOW_STOP_SCRIPT = (
    "mkdir -p /www && echo slow > /www/index.html && httpd -p 8080 -h /www; "
    f"trap 'sleep {SLOW_STOP_SECONDS}; exit 0' TERM; "
    "while :; do sleep 0.1; done"
)
"""PID 1 of the slow-stopping workload: serves on 8080, and on SIGTERM keeps serving for
``SLOW_STOP_SECONDS`` before it exits (an app finishing its requests)."""

OWNER_KEYS = ("owner", "helper", "egress-owner", "edge-owner", "agent-owner")
"""The labels (under ``io.pando.``) that name the owner of what an adapter makes: its apps'
containers, networks and volumes, its helpers, its gateways, edges and agent."""

UNPULLABLE = "127.0.0.1:9/pando-absent/app:1"
"""A registry on the daemon's own loopback where nothing listens: the pull is refused at once,
and no packet leaves the daemon's namespace."""


def _container(adapter: RuntimeAdapter, ref: WorkloadRef) -> str:
    naming: Any = getattr(adapter, "naming")  # noqa: B009 - the Docker adapter's naming
    return str(naming.container_name(ref.bundle_id, ref.workload))


class DockerHarness(ConformanceHarness):
    """Hooks of a real engine at ``host`` (``unix:///...`` or ``tcp://...``)."""

    image = BUSYBOX
    command = ("sh", "-c", WORKLOAD_SCRIPT)
    timeout = 60.0
    poll_interval = 0.1
    quiet_period = 1.5

    def __init__(self, host: str, proxy: SocketProxy | None = None, engine: Any = None) -> None:
        self.host = host
        self.proxy = proxy
        self.engine = engine
        """The harness's engine (``localdocker``), whose daemon the hang hooks freeze."""

    def can(self, hook: str) -> bool:
        """The hang hooks only with the harness's own engine, whose daemon they freeze."""
        if hook in ("runtime_hangs", "runtime_answers"):
            return self.engine is not None
        return super().can(hook)

    def _engine(self) -> Any:
        if self.engine is None:
            raise HarnessCannot("freeze the daemon (not the harness's own engine)")
        return self.engine

    async def runtime_hangs(self, adapter: RuntimeAdapter) -> None:
        self._engine().freeze()

    async def runtime_answers(self, adapter: RuntimeAdapter) -> None:
        self._engine().thaw()

    def _proxy(self) -> SocketProxy:
        if self.proxy is None:
            raise HarnessCannot("cut the adapter off its daemon (no unix socket to proxy)")
        return self.proxy

    async def cause_event_gap(self, adapter: RuntimeAdapter) -> None:
        proxy = self._proxy()
        cache: Any = getattr(adapter, "cache")  # noqa: B009 - the Docker adapter's cache
        proxy.cut()
        with anyio.fail_after(self.timeout):
            while cache.connected:  # noqa: ASYNC110 - polls the adapter's real state
                await anyio.sleep(0.02)
        proxy.restore()

    async def cache_goes_stale(self, adapter: RuntimeAdapter) -> None:
        self._proxy().cut()
        with anyio.fail_after(self.timeout):
            while True:
                try:
                    await adapter.observe(BundleRef("pando-stale-probe"))
                except AdapterUnavailable:
                    return
                await anyio.sleep(0.05)

    async def cache_unconfirmed(self, adapter: RuntimeAdapter) -> None:
        self._proxy().cut()

    async def cache_recovers(self, adapter: RuntimeAdapter) -> None:
        self._proxy().restore()

    async def docker(self, *args: str, check: bool = True) -> str:
        """Run the ``docker`` command against the engine; its stdout."""
        result = await anyio.run_process(["docker", "-H", self.host, *args], check=False)
        if check and result.returncode != 0:
            msg = f"docker {' '.join(args[:2])} failed: {result.stderr.decode()[-400:]}"
            raise AssertionError(msg)
        return result.stdout.decode()

    async def inspect(self, name: str) -> dict[str, Any]:
        """``docker inspect`` of one object."""
        data = json.loads(await self.docker("inspect", name))
        return dict(data[0])

    async def end_workload(self, adapter: RuntimeAdapter, ref: WorkloadRef, exit_code: int) -> None:
        name = _container(adapter, ref)
        await self.docker("exec", name, "sh", "-c", f"echo {exit_code} > /pando-exit")

    async def oom_kill(self, adapter: RuntimeAdapter, ref: WorkloadRef) -> None:
        name = _container(adapter, ref)
        await self.docker("update", "--memory", "24m", "--memory-swap", "24m", name)
        await self.docker("exec", name, "touch", "/pando-oom")

    async def write_log(self, adapter: RuntimeAdapter, ref: WorkloadRef, data: bytes) -> None:
        name = _container(adapter, ref)
        await self.docker(
            "exec", name, "sh", "-c", 'printf "%s" "$1" > /proc/1/fd/1', "sh", data.decode()
        )

    async def unpullable_image(self, adapter: RuntimeAdapter) -> str:
        return UNPULLABLE

    async def slow_stop_workload(self, adapter: RuntimeAdapter, name: str) -> WorkloadPlan:
        return WorkloadPlan(name=name, image=BUSYBOX, command=("sh", "-c", SLOW_STOP_SCRIPT))

    async def instance_runs(
        self, adapter: RuntimeAdapter, ref: WorkloadRef, instance_id: str
    ) -> bool:
        """The engine's own word: the container (its id) exists and runs."""
        state = await self.docker(
            "inspect", "--format", "{{.State.Running}}", instance_id, check=False
        )
        return state.strip() == "true"

    async def remove_owned(self, owner: str) -> None:
        """Remove every container, network and volume an owner's adapter left (test cleanup).

        Over the Engine API on a unix socket (a few calls; the CLI's would be a process each),
        through the CLI otherwise.
        """
        if not self.host.startswith("unix://"):
            await self._remove_owned_by_cli(owner)
            return
        keys = [f"io.pando.{key}" for key in OWNER_KEYS]

        def owned(labels: dict[str, str] | None) -> bool:
            return any((labels or {}).get(key) == owner for key in keys)

        transport = httpx.AsyncHTTPTransport(uds=self.host.removeprefix("unix://"))
        async with httpx.AsyncClient(transport=transport, base_url="http://docker") as api:

            async def delete_all(paths: list[str], params: dict[str, str]) -> None:
                # a few at once: a test with many apps spends seconds on serial removals
                limit = anyio.CapacityLimiter(REMOVALS_AT_ONCE)

                async def delete(path: str) -> None:
                    async with limit:
                        await api.delete(path, params=params)

                async with anyio.create_task_group() as group:
                    for path in paths:
                        group.start_soon(delete, path)

            listed = (await api.get("/containers/json", params={"all": "1"})).json()
            mine = [c for c in listed if owned(c["Labels"])]
            apps = [c for c in mine if "io.pando.owner" in c["Labels"]]
            removal = {"force": "1", "v": "1"}
            for containers in (apps, [c for c in mine if c not in apps]):
                # an app's first, then its gateway, edge, agent
                await delete_all([f"/containers/{c['Id']}" for c in containers], removal)
            networks = (await api.get("/networks")).json()
            paths = [f"/networks/{n['Id']}" for n in networks if owned(n.get("Labels"))]
            await delete_all(paths, {})
            volumes = (await api.get("/volumes")).json().get("Volumes") or []
            paths = [f"/volumes/{v['Name']}" for v in volumes if owned(v.get("Labels"))]
            await delete_all(paths, {"force": "1"})

    async def _remove_owned_by_cli(self, owner: str) -> None:
        label = f"label=io.pando.owner={owner}"
        helpers = f"label=io.pando.helper={owner}"
        ids = (await self.docker("ps", "-aq", "--filter", label)).split()
        ids += (await self.docker("ps", "-aq", "--filter", helpers)).split()
        if ids:
            await self.docker("rm", "-f", "-v", *ids, check=False)
        gateways = f"label=io.pando.egress-owner={owner}"  # a restricted bundle's gateway
        edges = f"label=io.pando.edge-owner={owner}"
        agents = f"label=io.pando.agent-owner={owner}"
        ids = (await self.docker("ps", "-aq", "--filter", gateways)).split()
        ids += (await self.docker("ps", "-aq", "--filter", edges)).split()
        ids += (await self.docker("ps", "-aq", "--filter", agents)).split()
        if ids:
            await self.docker("rm", "-f", "-v", *ids, check=False)
        networks = (await self.docker("network", "ls", "-q", "--filter", label)).split()
        networks += (await self.docker("network", "ls", "-q", "--filter", helpers)).split()
        networks += (await self.docker("network", "ls", "-q", "--filter", gateways)).split()
        networks += (await self.docker("network", "ls", "-q", "--filter", edges)).split()
        networks += (await self.docker("network", "ls", "-q", "--filter", agents)).split()
        if networks:
            await self.docker("network", "rm", *networks, check=False)
        volumes = (await self.docker("volume", "ls", "-q", "--filter", label)).split()
        if volumes:
            await self.docker("volume", "rm", "-f", *volumes, check=False)
