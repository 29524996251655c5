"""A set of real nodes (one or more) beside kwok's: their network, the relay between them
and the API server, and cluster DNS. :class:`RealNodeSet` starts and stops them.

Order matters: :meth:`RealNodeSet.prepare` (before the API server starts: the namespaces, the
relay and the API server's egress selector) and :meth:`RealNodeSet.start` (once the API server
answers: each node, then cluster DNS on the first). :meth:`RealNodeSet.stop` undoes everything
on every path, and a crashed run's leftovers are removed by the next :meth:`prepare` (see
:mod:`.host`).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..net import wait_until
from ..process import Component
from . import addons, configs, host
from .network import API_SERVER_IP, NodesNetwork
from .stack import ApiAccess, NodeBinaries, NodeImage, RealNode, create, pod_ready

SUPPORT_DIR = Path(__file__).resolve().parents[2]
"""``tests/support``: on the relay's ``PYTHONPATH``."""
_SETS = itertools.count(1)
"""Sets made by this process: each set's namespaces and cgroups carry its number."""


def real_node_name(index: int) -> str:
    """The name of node ``index`` of a set."""
    return f"real-node-{index}"


@dataclass
class RealNodeSet:
    """Real nodes joined by the harness's network, as a cluster's machines are.

    ``heartbeat``: how soon a node that stops reporting is called lost (``None``: Kubernetes'
    defaults; see :class:`~.configs.Heartbeat`).
    """

    work_dir: Path
    count: int
    binaries: NodeBinaries
    images: Sequence[NodeImage]
    sandbox_image: str
    coredns_image: str
    heartbeat: configs.Heartbeat | None = None
    start_timeout: float = 120.0
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.prefix = f"pando-{os.getpid()}-rn{next(_SETS)}-"
        self.network = NodesNetwork.named(self.prefix, self.count)
        self.cgroup_parent = f"/{self.prefix.rstrip('-')}"
        self.egress_socket = self.work_dir / "egress.sock"
        self.nodes = [
            RealNode(
                name=real_node_name(i),
                work_dir=self.work_dir / f"node{i}",
                binaries=self.binaries,
                images=self.images,
                sandbox_image=self.sandbox_image,
                network=place,
                cgroup_root=f"{self.cgroup_parent}/node{i}",
                heartbeat=self.heartbeat,
                start_timeout=self.start_timeout,
            )
            for i, place in enumerate(self.network.nodes)
        ]
        self.relay: Component | None = None
        self._record: host.HostRecord | None = None

    # ------------------------------------------------------------------ before the API server

    def apiserver_args(self) -> list[str]:
        """Flags the API server needs to reach the nodes (through the relay)."""
        return [f"--egress-selector-config-file={self.work_dir / 'egress-selector.yaml'}"]

    def controller_manager_args(self) -> list[str]:
        """Flags the controller manager needs for the nodes' heartbeat."""
        return self.heartbeat.controller_manager_args() if self.heartbeat is not None else []

    def prepare(self, api: ApiAccess) -> None:
        """Clean a dead run's leftovers, make the namespaces, start the relay and write each
        node's files."""
        host.clean_leftovers()
        (self.work_dir / "logs").mkdir(parents=True, exist_ok=True)
        self._record = host.record(
            self.prefix, self.work_dir, self.cgroup_parent, self.network.namespaces
        )
        self.network.create()
        (self.work_dir / "egress-selector.yaml").write_text(
            json.dumps(
                {
                    "apiVersion": "apiserver.k8s.io/v1beta1",
                    "kind": "EgressSelectorConfiguration",
                    "egressSelections": [
                        {
                            "name": "cluster",
                            "connection": {
                                "proxyProtocol": "HTTPConnect",
                                "transport": {"uds": {"udsName": str(self.egress_socket)}},
                            },
                        }
                    ],
                }
            )
        )
        self._start_relay(api)
        for node in self.nodes:
            node.write_files(api)

    def _start_relay(self, api: ApiAccess) -> None:
        forwards = [
            {"listen_netns": self.network.outside, "listen": f"{API_SERVER_IP}:{api.port}",
             "target": f"127.0.0.1:{api.port}"},
        ]  # fmt: skip
        for place in self.network.nodes:
            ports = [api.port] if api.registry_port is None else [api.port, api.registry_port]
            forwards += [
                {"listen_netns": place.node, "listen": f"127.0.0.1:{port}",
                 "target": f"127.0.0.1:{port}"}
                for port in ports
            ]  # fmt: skip
        relay_config = self.work_dir / "relay.json"
        ready = self.work_dir / "relay.ready"
        relay_config.write_text(
            json.dumps(
                {
                    "forwards": forwards,
                    "connect_proxy": {
                        "socket": str(self.egress_socket),
                        "routes": self.network.relay_routes(),
                    },
                    "ready_file": str(ready),
                }
            )
        )
        self.relay = Component(
            "relay",
            [sys.executable, "-m", "localcluster.realnode.relay", str(relay_config)],
            self.work_dir / "logs" / "relay.log",
            cwd=self.work_dir,
            env={**os.environ, "PYTHONPATH": str(SUPPORT_DIR)},
        )
        self.relay.start()
        t0 = time.monotonic()
        if not wait_until(ready.exists, timeout=self.start_timeout, interval=0.2,
                          abort=self._relay_dead):  # fmt: skip
            raise RuntimeError(f"real nodes: timed out: relay ready\n{self.logs()}")
        self.timings["relay ready"] = round(time.monotonic() - t0, 2)

    def _relay_dead(self) -> str | None:
        code = self.relay.exit_code() if self.relay is not None else None
        return None if code is None else f"the relay exited with code {code}"

    # ------------------------------------------------------------------ once the API server answers

    def publish_api_endpoint(self, rest: Any, port: int) -> None:
        """Point the ``kubernetes`` Service at the relay for pods (see :mod:`.addons`)."""
        create(rest, addons.kubernetes_endpoints(port))

    def start(self, rest: Any) -> None:
        """Start each node, then the RuntimeClasses (gVisor's where the nodes have it) and
        CoreDNS (on the first node); return when every node is Ready and DNS answers."""
        t0 = time.monotonic()
        for node in self.nodes:
            node.start(rest)
            self.timings[f"{node.name} ready"] = round(time.monotonic() - t0, 2)
        sandboxed = (addons.runtime_class("real", sandboxed=True),) if self.binaries.runsc else ()
        docs = (
            addons.runtime_class("real"),
            *sandboxed,
            *addons.coredns_objects(self.coredns_image, node_name=self.nodes[0].name),
        )
        for doc in docs:
            create(rest, doc)
        dns = lambda: pod_ready(rest, addons.DNS_NAMESPACE, "coredns")  # noqa: E731
        remaining = max(0.0, t0 + self.start_timeout - time.monotonic())
        if not wait_until(dns, timeout=remaining, interval=0.2):
            raise RuntimeError(f"real nodes: timed out: cluster DNS ready\n{self.logs()}")
        self.timings["cluster DNS ready"] = round(time.monotonic() - t0, 2)
        self.timings["total"] = round(time.monotonic() - t0, 2)

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Stop every node's programs and the relay, then remove the namespaces, mounts and
        cgroups and restore the host's settings."""
        for node in self.nodes:
            node.stop()
        if self.relay is not None:
            self.relay.stop(5.0)
            self.relay = None
        if self._record is not None:
            host.undo(self._record)
            self._record = None

    def logs(self, lines: int = 30) -> str:
        """The tail of each program's log, for failure reports."""
        parts = [f"===== {node.name} =====\n{node.logs(lines)}" for node in self.nodes]
        if self.relay is not None:
            parts.append(f"----- relay -----\n{self.relay.tail(lines)}")
        return "\n".join(parts)
