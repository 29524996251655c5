"""Pure logic of part 2: exec status, the exec pump, socket tables, volume and edge objects."""

from __future__ import annotations

import socket
import threading
import types
from typing import Any

import anyio
import pytest
from pando_runtime_kubernetes._names import claim_name, edge_object_name, helper_name
from pando_runtime_kubernetes.api._exec import KubeExecSession, exit_code_of, with_env
from pando_runtime_kubernetes.features._edge import edge_objects, pod_reason
from pando_runtime_kubernetes.features._trial import listening_ports
from pando_runtime_kubernetes.features._volumes import (
    claim_body,
    helper_pod,
    parse_handle,
    volume_handle,
)
from pando_runtime_kubernetes.manifests._workload_objects import PodSettings
from websocket import ABNF, WebSocketConnectionClosedException

from pando_runtime import EdgeMount, EdgePlan, EdgePort, NotFound, Port, PortProtocol, VolumeHandle

pytestmark = pytest.mark.anyio


def test_exit_status_from_the_error_channel() -> None:
    assert exit_code_of(b'{"metadata":{},"status":"Success"}') == 0
    failure = (
        b'{"status":"Failure","reason":"NonZeroExitCode",'
        b'"details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
    )
    assert exit_code_of(failure) == 3
    kwok = b'{"status":"Failure","reason":"InternalError","message":"cmd wait: sh: exit status 7"}'
    assert exit_code_of(kwok) == 7
    assert exit_code_of(b"") is None, "an empty error channel: the exit is unknown, never 0"
    assert exit_code_of(b'{"status":"Failure","message":"no such container"}') is None


def test_env_reaches_the_command_only() -> None:
    assert with_env(["cat"], {}) == ["cat"]
    assert with_env(["sh", "-c", "x"], {"B": "2", "A": "1"}) == [
        "env",
        "A=1",
        "B=2",
        "sh",
        "-c",
        "x",
    ]


class FakeWs:
    """A stand-in for the WebSocket client: scripted frames, recorded writes."""

    subprotocol = "v5.channel.k8s.io"

    def __init__(self, frames: list[tuple[int, bytes]], *, close_after: bool = True) -> None:
        self._channels: dict[int, bytes] = {}
        self.frames = frames
        self.written: list[tuple[int, bytes]] = []
        self.closed_channels: list[int] = []
        self.open = True
        self.close_after = close_after
        self.threads: set[str] = set()

    def is_open(self) -> bool:
        return self.open

    def update(self, timeout: float = 0) -> None:
        self.threads.add(threading.current_thread().name)
        if self.frames:
            channel, data = self.frames.pop(0)
            self._channels[channel] = self._channels.get(channel, b"") + data
        elif self.close_after and self.closed_channels:
            self.open = False
        else:
            threading.Event().wait(min(timeout, 0.01))

    def write_channel(self, channel: int, data: bytes) -> None:
        self.written.append((channel, data))

    def close_channel(self, channel: int) -> None:
        self.closed_channels.append(channel)

    def close(self) -> None:
        self.open = False


async def _session(ws: FakeWs, *, stdin: bool) -> tuple[KubeExecSession, Any]:
    return KubeExecSession(ws, want_stdin=stdin, limiter=anyio.CapacityLimiter(2)), ws


async def test_the_pump_separates_outputs_sends_stdin_and_end_of_file() -> None:
    ws = FakeWs([(1, b"out"), (2, b"err"), (1, b"put"), (3, b'{"status":"Success"}')])
    session, _ = await _session(ws, stdin=True)
    async with anyio.create_task_group() as group:
        group.start_soon(anyio.to_thread.run_sync, session.pump)
        assert session.stdin is not None
        await session.stdin.send(b"hello")
        await session.resize(24, 80)
        await session.stdin.aclose()
        out = b"".join([c async for c in session.stdout])
        err = b"".join([c async for c in session.stderr])
        assert await session.wait() == 0
    assert (out, err) == (b"output", b"err")
    assert (0, b"hello") in ws.written
    assert (4, b'{"Width": 80, "Height": 24}') in ws.written
    assert ws.closed_channels == [0], "closing stdin sends the v5 close frame"
    assert not ws.open, "the pump returned (the task group joined it) and closed the socket"


async def test_closing_a_session_stops_its_thread_and_unknown_exit_is_none() -> None:
    ws = FakeWs([(1, b"x")], close_after=False)  # a command that never ends
    session, _ = await _session(ws, stdin=False)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, session.pump)
            assert await session.stdout.receive() == b"x"
            await session.aclose()
        assert await session.wait() is None
    assert not ws.open


class ClosingSocket:
    """A WebSocket whose frames come from a script and which then drops the connection."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames
        self.ends, peer = socket.socketpair()
        peer.send(b"x")  # always readable: select() says a frame is there
        self.sock = self.ends
        self._peer = peer
        self.connected = True

    def recv_data_frame(self, control_frame: bool = False) -> tuple[int, Any]:
        if not self.frames:
            raise WebSocketConnectionClosedException("Connection to remote host was lost.")
        return ABNF.OPCODE_BINARY, types.SimpleNamespace(data=self.frames.pop(0))

    def close(self) -> None:
        self.ends.close()
        self._peer.close()


class SocketWs:
    """The client around :class:`ClosingSocket`, as ``kubernetes.stream`` builds it."""

    subprotocol = "v5.channel.k8s.io"

    def __init__(self, sock: ClosingSocket) -> None:
        self.sock = sock
        self._connected = True

    def is_open(self) -> bool:
        return self._connected

    def close(self) -> None:
        self._connected = False
        self.sock.close()


async def test_an_exit_status_sent_just_before_the_connection_drops_is_kept() -> None:
    status = (
        b'{"status":"Failure","reason":"NonZeroExitCode",'
        b'"details":{"causes":[{"reason":"ExitCode","message":"4"}]}}'
    )
    ws = SocketWs(ClosingSocket([b"\x01done", b"\x03" + status]))
    session = KubeExecSession(ws, want_stdin=False, limiter=anyio.CapacityLimiter(2))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, session.pump)
            out = b"".join([c async for c in session.stdout])
            assert await session.wait() == 4, "read in the same batch as the drop: not lost"
    assert out == b"done"


def test_socket_tables() -> None:
    tcp = (
        "  sl  local_address rem_address   st tx_queue\n"
        "   0: 00000000:1F90 00000000:0000 0A 00000000\n"  # 0.0.0.0:8080 LISTEN
        "   1: 0100007F:1A0A 00000000:0000 0A 00000000\n"  # 127.0.0.1:6666 LISTEN
        "   2: 0100007F:0050 0100007F:9C40 01 00000000\n"  # established: not a listener
        "   0: 00000000000000000000000001000000:2328 00000000000000000000000000000000:0000 0A\n"
        "   1: 00000000000000000000000000000000:01BB 00000000000000000000000000000000:0000 0A\n"
    )
    udp = "   0: 00000000:0035 00000000:0000 07 00000000\n"
    routable, loopback = listening_ports({PortProtocol.TCP: tcp, PortProtocol.UDP: udp})
    assert routable == {Port(8080), Port(443), Port(53, PortProtocol.UDP)}
    assert loopback == {Port(6666), Port(9000)}


def test_volume_objects_and_handles() -> None:
    assert claim_name("Data_1") == "pando-vol-data-1"
    assert len(claim_name("x" * 48)) <= 63
    assert helper_name(claim_name("v" * 48)).startswith("pando-volume-helper-")
    assert len(helper_name(claim_name("v" * 48))) <= 63
    claim = claim_body(
        "pando-a", "Data_1", bundle_id="A", name="data", size_bytes=1024, storage_class="fast"
    )
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1024"}},
        "storageClassName": "fast",
    }
    pod = helper_pod(
        "pando-a",
        "pando-vol-data-1",
        image="busybox:1.37",
        mount_path="/data/pando-vol-data-1",
        read_only=True,
        node_name="node-1",
        placement=PodSettings("sandboxed", {"pool": "a"}),
    )
    assert pod["spec"]["nodeName"] == "node-1"
    assert pod["spec"]["runtimeClassName"] == "sandboxed"
    unbound = helper_pod(
        "pando-a",
        "pando-vol-data-1",
        image="busybox:1.37",
        mount_path="/data/pando-vol-data-1",
        read_only=False,
        node_name=None,
        placement=PodSettings("sandboxed", {"pool": "a"}),
    )
    assert unbound["spec"]["runtimeClassName"] == "sandboxed"
    assert unbound["spec"]["nodeSelector"] == {"pool": "a"}
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] is True
    assert pod["metadata"]["labels"]["pando.dev/role"] == "volume-helper"
    handle = volume_handle("pando-a", "Data_1", "A")
    assert parse_handle(handle) == ("pando-a", "Data_1", "A")
    assert parse_handle(volume_handle("pando-edge", "acme", None)) == ("pando-edge", "acme", None)
    with pytest.raises(NotFound):
        parse_handle(VolumeHandle(volume_id="x", handle="none"))


def test_edge_objects() -> None:
    plan = EdgePlan(
        name="main",
        image="traefik:3",
        env={"K": "v"},
        ports=(EdgePort(published=443, target=8443),),
        mounts=(EdgeMount(path="/acme", volume_id="acme"),),
        replicas=1,
    )
    docs = {
        d["kind"]: d
        for d in edge_objects(
            plan,
            namespace="pando-edge",
            digest="d",
            service_type="LoadBalancer",
            placement=PodSettings("sandboxed", {"pool": "edge"}),
        )
    }
    template = docs["Deployment"]["spec"]["template"]["spec"]
    assert (template["runtimeClassName"], template["nodeSelector"]) == (
        "sandboxed",
        {"pool": "edge"},
    )
    deployment = docs["Deployment"]
    assert deployment["metadata"]["name"] == edge_object_name("main")
    assert deployment["spec"]["replicas"] == 2, "an edge never runs fewer than two replicas"
    assert deployment["metadata"]["annotations"]["pando.dev/edge-volumes"] == "acme"
    assert docs["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    service = docs["Service"]["spec"]
    assert service["type"] == "LoadBalancer"
    assert service["ports"][0] == {
        "name": "p443-tcp",
        "port": 443,
        "targetPort": 8443,
        "protocol": "TCP",
    }
    assert "v" not in str(deployment["spec"]["template"]["spec"]["containers"][0].get("env", ""))
    pending = {
        "metadata": {"name": "p1"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "message": "0/2 nodes are available: 2 Insufficient cpu.",
                }
            ],
        },
    }
    assert pod_reason(pending) == "pod p1 is Pending: 0/2 nodes are available: 2 Insufficient cpu."


def test_the_canary_admits_only_its_labelled_probe() -> None:
    from pando_runtime_kubernetes.features._canary import (  # noqa: PLC0415
        ADMITTED,
        EGRESS_DENIED,
        canary_objects,
        probe,
    )

    docs = canary_objects("pando-canary-x", image="busybox:1.37", subject="User:a", role="r")
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace", "RoleBinding", "NetworkPolicy", "NetworkPolicy", "Pod"]
    policy = docs[2]["spec"]
    assert policy["podSelector"] == {}
    assert policy["ingress"] == [{"from": [{"podSelector": {"matchLabels": {ADMITTED: "true"}}}]}]
    # The egress probe is admitted, but a policy with no egress rule selects it.
    egress = docs[3]["spec"]
    assert egress == {
        "podSelector": {"matchLabels": {EGRESS_DENIED: "true"}},
        "policyTypes": ["Egress"],
    }
    admitted = probe("pando-canary-x", "a", "busybox:1.37", "10.0.0.5", admitted=True)
    denied = probe("pando-canary-x", "d", "busybox:1.37", "10.0.0.5", admitted=False)
    cut = probe(
        "pando-canary-x", "e", "busybox:1.37", "10.0.0.5", admitted=True, egress_denied=True
    )
    assert admitted["metadata"]["labels"][ADMITTED] == "true"
    assert ADMITTED not in denied["metadata"]["labels"]
    assert EGRESS_DENIED not in admitted["metadata"]["labels"]
    assert cut["metadata"]["labels"][ADMITTED] == cut["metadata"]["labels"][EGRESS_DENIED] == "true"
    for pod in (docs[4], admitted, denied, cut):
        assert pod["spec"]["restartPolicy"] == "Never"
        assert pod["spec"]["automountServiceAccountToken"] is False
    assert "10.0.0.5:8080" in " ".join(denied["spec"]["containers"][0]["command"])
    assert "runtimeClassName" not in admitted["spec"]


def test_the_canary_runs_where_app_pods_run() -> None:
    from pando_runtime_kubernetes.features._canary import canary_objects, probe  # noqa: PLC0415

    placement = PodSettings("sandboxed", {"pool": "apps"})
    server = canary_objects(
        "pando-canary-x", image="busybox:1.37", subject=None, role="r", placement=placement
    )[-1]
    admitted = probe(
        "pando-canary-x", "a", "busybox:1.37", "10.0.0.5", admitted=True, placement=placement
    )
    for pod in (server, admitted):
        assert pod["spec"]["runtimeClassName"] == "sandboxed"
        assert pod["spec"]["nodeSelector"] == {"pool": "apps"}
