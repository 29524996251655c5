"""Hardened app pods, in effect: what a container may do to its node and its neighbours.

Checked from inside real containers on the real node (see ``docs/security.md``): the kernel's
own view of each process (``/proc/self/status``: seccomp mode, no_new_privs, capability sets),
raw sockets refused, a fork bomb held to the pod's pids limit and a CPU hog to its quota (read
from the node's cgroups on this machine, where the node runs) while a neighbour app keeps
answering, and the node's own ports out of a pod's reach. Each block is paired with a control
that shows its target answers, so the block is the hardening's and not a dead end.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _real import MARKS, new_id, serve, sh, wait_for
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import LABEL_WORKLOAD, namespace_for

from pando_runtime import (
    BundlePlan,
    BundleRef,
    CapabilityUnsupported,
    ExecRequest,
    Port,
    Privileges,
    Resources,
    WorkloadPlan,
    WorkloadRef,
)

pytestmark = MARKS

CAPABILITY_BITS = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6,
    "SETUID": 7, "SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_RAW": 13, "SYS_CHROOT": 18,
    "MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31,
}  # fmt: skip
"""Bit numbers of the capabilities these tests name (``linux/capability.h``)."""
DEFAULTS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_BIND_SERVICE", "SETGID",
            "SETUID")  # fmt: skip
"""What the adapter's documentation promises every app container (docs/security.md)."""
CGROUPS = Path("/sys/fs/cgroup")


def _mask(names: tuple[str, ...]) -> int:
    return sum(1 << CAPABILITY_BITS[name] for name in names)


def _status(text: bytes) -> dict[str, str]:
    """``/proc/<pid>/status`` as a mapping of its fields."""
    fields = (line.split(":", 1) for line in text.decode().splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in fields}


async def _run(adapter: KubernetesAdapter, ref: WorkloadRef, script: str) -> Any:
    return await adapter.run(ref, ExecRequest(command=("sh", "-c", script)))


# -- seccomp, no_new_privs, capabilities ------------------------------------------------------


async def test_app_containers_run_under_seccomp_without_new_privileges_or_raw_sockets(
    real_adapter: KubernetesAdapter,
) -> None:
    caps = await real_adapter.capabilities()
    assert caps.default_capabilities == DEFAULTS
    app = new_id("hardened")
    plan = BundlePlan(
        bundle_id=app,
        workloads=(
            sh("probe", "sleep 3600"),
            # Asks for two capabilities beyond the defaults, both within what is granted.
            sh("chrooter", "sleep 3600", privileges=Privileges(capabilities=("SYS_CHROOT",
                                                                             "MKNOD"))),
        ),
    )  # fmt: skip
    await real_adapter.apply(plan)
    try:
        await wait_for(real_adapter, app, lambda o: o.all_running)
        probe = WorkloadRef(app, "probe")
        # The main process (PID 1) and an exec'd one: the same restrictions.
        for pid in ("1", "self"):
            status = await _run(real_adapter, probe, f"cat /proc/{pid}/status")
            assert status.exit_code == 0, status
            fields = _status(status.stdout)
            assert fields["Seccomp"] == "2", fields  # a filter: the runtime's default profile
            assert fields["NoNewPrivs"] == "1", fields
            assert int(fields["CapEff"], 16) == _mask(DEFAULTS), fields
            assert int(fields["CapBnd"], 16) == _mask(DEFAULTS), "dropped for good"
            assert int(fields["CapEff"], 16) & _mask(("NET_RAW",)) == 0
        # Raw sockets are refused: ping (ICMP) and arping (a packet socket on the pod's link).
        ping = await _run(real_adapter, probe, "ping -c 1 -W 2 127.0.0.1")
        assert ping.exit_code != 0
        assert b"permitted" in ping.stderr or b"denied" in ping.stderr, ping
        arping = await _run(real_adapter, probe, "arping -c 1 -w 2 -I eth0 198.18.0.1")
        assert arping.exit_code != 0
        assert b"permitted" in arping.stderr or b"denied" in arping.stderr, arping
        # What the plan asked for is granted, to that workload only.
        chrooter = await _run(real_adapter, WorkloadRef(app, "chrooter"), "cat /proc/self/status")
        granted = _status(chrooter.stdout)
        assert int(granted["CapEff"], 16) == _mask((*DEFAULTS, "SYS_CHROOT", "MKNOD")), granted
        assert granted["NoNewPrivs"] == "1"
        made = await _run(real_adapter, WorkloadRef(app, "chrooter"), "mknod /tmp/null c 1 3")
        assert made.exit_code == 0, made
        refused = await _run(real_adapter, probe, "mknod /tmp/null c 1 3")
        assert refused.exit_code != 0, "MKNOD is not a default"
    finally:
        await real_adapter.destroy(BundleRef(app))


async def test_a_capability_the_cluster_does_not_grant_is_refused_before_anything_is_written(
    real_adapter: KubernetesAdapter,
) -> None:
    caps = await real_adapter.capabilities()
    assert "NET_RAW" not in caps.grantable_capabilities
    app = new_id("raw")
    plan = BundlePlan(
        bundle_id=app,
        workloads=(sh("pinger", "sleep 3600", privileges=Privileges(capabilities=("NET_RAW",))),),
    )
    with pytest.raises(CapabilityUnsupported) as refused:
        await real_adapter.apply(plan)
    assert refused.value.capability == "grantable_capabilities"
    problems = refused.value.details["problems"]
    assert [p["path"] for p in problems] == ["workloads[0].privileges.capabilities[0]"]
    assert not (await real_adapter.observe(BundleRef(app))).exists


# -- a fork bomb and a CPU hog beside a neighbour ----------------------------------------------


def _pod(admin_api: Any, bundle: str, workload: str) -> Any:
    from kubernetes import client  # noqa: PLC0415

    pods = client.CoreV1Api(admin_api).list_namespaced_pod(
        namespace_for(bundle), label_selector=f"{LABEL_WORKLOAD}={workload}"
    )
    assert len(pods.items) == 1, [p.metadata.name for p in pods.items]
    return pods.items[0]


def _cgroup(controller: str, cgroup_root: str, name: str) -> Path:
    """The directory ``name`` (``pod<uid>`` or a container id) of ``controller`` under the
    node's cgroup root (kubelet's cgroupfs layout: ``kubepods/<class>/pod<uid>/<id>``)."""
    base = CGROUPS / controller / cgroup_root.strip("/")
    found = [p for p in base.rglob(name) if p.is_dir()]
    assert len(found) == 1, f"{controller} cgroup {name}: {found}"
    return found[0]


def _refused_forks(pod_cgroup: Path) -> int:
    """Forks the pids controller refused in the pod's cgroup or its containers' (cgroup v1
    counts a refusal where the fork happened, not where the limit sits)."""
    return sum(_counters(p).get("max", 0) for p in pod_cgroup.rglob("pids.events"))


def _counters(path: Path) -> dict[str, int]:
    """A cgroup file of ``key value`` lines (``pids.events``, ``cpu.stat``)."""
    pairs = (line.split() for line in path.read_text().splitlines() if line.strip())
    return {key: int(value) for key, value in pairs}


async def _neighbour_answers(adapter: KubernetesAdapter, neighbour: str) -> None:
    """The neighbour app's client fetches its web page (a new process, a connection, an
    answer); asked again while a busy machine makes one attempt time out."""
    client = WorkloadRef(neighbour, "client")
    script = "wget -q -T 10 -O - http://web:8080/"
    with anyio.move_on_after(120):
        while (await _run(adapter, client, script)).stdout != b"ok-web\n":  # noqa: ASYNC110
            await anyio.sleep(1)  # polled: nothing announces an answer
    fetched = await _run(adapter, client, script)
    assert (fetched.exit_code, fetched.stdout) == (0, b"ok-web\n"), fetched


@contextlib.asynccontextmanager
async def _beside_a_neighbour(
    adapter: KubernetesAdapter, admin_api: Any, noisy: WorkloadPlan
) -> AsyncIterator[tuple[str, str, Any]]:
    """Run ``noisy`` alone in an app beside a neighbour app (``web`` serving, ``client``);
    yield the neighbour's bundle id, ``noisy``'s and its pod once both run; destroy both
    after (checking ``noisy`` was held, not ended)."""
    app, neighbour = new_id(noisy.name), new_id("neighbour")
    web = serve("web", 8080, ports=(Port(8080),))
    await adapter.apply(
        BundlePlan(bundle_id=neighbour, workloads=(web, sh("client", "sleep 3600")))
    )
    await adapter.apply(BundlePlan(bundle_id=app, workloads=(noisy,)))
    try:
        await wait_for(adapter, neighbour, lambda o: o.all_running)
        await wait_for(adapter, app, lambda o: o.all_running)
        yield neighbour, app, await anyio.to_thread.run_sync(_pod, admin_api, app, noisy.name)
        assert (await adapter.observe(BundleRef(app))).all_running, "held, not killed"
    finally:
        await adapter.destroy(BundleRef(app))
        await adapter.destroy(BundleRef(neighbour))


@pytest.fixture
def node(real_node_cluster: Any) -> Any:
    """The harness's real node (its cgroup root, namespaces and ports)."""
    return real_node_cluster.local.real_node


async def test_a_fork_bomb_is_held_to_the_pods_pids_limit_while_a_neighbour_answers(
    real_adapter: KubernetesAdapter, real_admin_api: Any, node: Any
) -> None:
    from localcluster.realnode import configs  # noqa: PLC0415

    # Once told to (/tmp/go), PID 1 starts the bomb (each process starts two more, forever),
    # then becomes sleep (exec: no fork needed) so the container lives on. The CPU limit
    # keeps the churn of refused forks from starving this busy machine; it does not limit
    # the process count.
    script = "b() { b | b & }; until [ -e /tmp/go ]; do sleep 0.2; done; b; exec sleep 3600"
    bomb = sh("bomb", script, resources=Resources(cpu_millis=300))
    async with _beside_a_neighbour(real_adapter, real_admin_api, bomb) as (neighbour, app, pod):
        pids = _cgroup("pids", node.cgroup_root, f"pod{pod.metadata.uid}")
        # The limit is in place before the bomb goes off: else stop here (this machine holds
        # 32768 processes in all).
        assert int((pids / "pids.max").read_text()) == configs.POD_PIDS_LIMIT
        went = await _run(real_adapter, WorkloadRef(app, "bomb"), "touch /tmp/go")
        assert went.exit_code == 0, went
        with anyio.fail_after(120):
            while _refused_forks(pids) == 0:  # noqa: ASYNC110 - no event says so
                await anyio.sleep(0.5)  # the kernel counts each fork the limit refused
        assert int((pids / "pids.current").read_text()) <= configs.POD_PIDS_LIMIT
        await _neighbour_answers(real_adapter, neighbour)
        assert (await real_adapter.observe(BundleRef(neighbour))).all_running


async def test_a_cpu_hog_is_held_to_its_limit_while_a_neighbour_answers(
    real_adapter: KubernetesAdapter, real_admin_api: Any, node: Any
) -> None:
    # Two spinning processes under a 50m limit: even on a machine so busy that each gets a
    # small share of a core, together they reach the quota (5 ms per 100 ms) and are held.
    spin = "while :; do :; done"
    hog = sh("hog", f"{spin} & {spin}", resources=Resources(cpu_millis=50))
    async with _beside_a_neighbour(real_adapter, real_admin_api, hog) as (neighbour, _, pod):
        container = pod.status.container_statuses[0].container_id.split("://", 1)[-1]
        cpu = _cgroup("cpu", node.cgroup_root, container)
        period = int((cpu / "cpu.cfs_period_us").read_text())
        assert int((cpu / "cpu.cfs_quota_us").read_text()) == period * 50 // 1000
        before = _counters(cpu / "cpu.stat")["nr_throttled"]
        with anyio.fail_after(120):
            while _counters(cpu / "cpu.stat")["nr_throttled"] <= before:  # noqa: ASYNC110
                await anyio.sleep(0.5)  # throttled: it used its quota and was held
        await _neighbour_answers(real_adapter, neighbour)


# -- the node's own ports ----------------------------------------------------------------------


def _tcp_from(netns_name: str, host: str, port: int) -> bool:
    """Whether a TCP connection from namespace ``netns_name`` to ``host:port`` opens."""
    from localcluster.realnode import netns  # noqa: PLC0415

    with netns.entered(netns_name):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(3)
        sock.connect((host, port))
    except OSError:
        return False
    finally:
        sock.close()
    return True


async def _pod_connects(adapter: KubernetesAdapter, ref: WorkloadRef, host: str, port: int) -> bool:
    result = await _run(adapter, ref, f"echo | timeout 4 nc {host} {port} >/dev/null 2>&1")
    return result.exit_code == 0


@pytest.fixture
def node_ports(node: Any, real_node_cluster: Any) -> Iterator[dict[str, tuple[str, int]]]:
    """What runs on the node, by where the node's own programs reach it."""
    from localcluster.realnode import network  # noqa: PLC0415

    local = node.local_ports
    ports = {
        "kubelet": (network.NODE_IP, 10250),
        "kubelet healthz": ("127.0.0.1", local["kubelet"]),
        "kube-proxy healthz": ("127.0.0.1", local["proxy"]),
        "kube-router health": ("127.0.0.1", local["router"]),
        "relay to the API server": ("127.0.0.1", real_node_cluster.local.ports["apiserver"]),
    }
    registry = real_node_cluster.local.registry
    if registry is not None:
        ports["relay to the registry"] = ("127.0.0.1", registry.port)
    return ports


async def test_a_pod_reaches_neither_its_nodes_programs_nor_the_hosts_relay(
    real_adapter: KubernetesAdapter, node: Any, node_ports: dict[str, tuple[str, int]]
) -> None:
    from localcluster.realnode import network  # noqa: PLC0415

    app = new_id("reach")
    workloads = (sh("probe", "sleep 3600"), serve("peer", 8080, ports=(Port(8080),)))
    await real_adapter.apply(BundlePlan(bundle_id=app, workloads=workloads))
    try:
        await wait_for(real_adapter, app, lambda o: o.all_running)
        probe = WorkloadRef(app, "probe")
        # Control: the probe's nc connects where its policy allows (its app's own workload),
        # so each refusal below is the policy's, not a probe that connects nowhere.
        with anyio.fail_after(60):
            while not await _pod_connects(real_adapter, probe, "peer", 8080):  # noqa: ASYNC110 - polls the real server
                await anyio.sleep(0.5)  # httpd starts after the container does
        for what, (address, port) in node_ports.items():
            # Control: it answers where the node's programs reach it.
            assert await anyio.to_thread.run_sync(_tcp_from, node.network.node, address, port), what
            # A pod: not at that address (its own loopback is its own), nor at any of the
            # node's addresses (the node's link, the pods' gateway).
            for target in {address, network.NODE_IP, network.POD_GATEWAY}:
                assert not await _pod_connects(real_adapter, probe, target, port), (what, target)
    finally:
        await real_adapter.destroy(BundleRef(app))
