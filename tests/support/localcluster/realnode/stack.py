"""One real node beside kwok's: containerd, kubelet, kube-proxy and kube-router in namespaces
of the harness's, with CoreDNS as a pod on it. :class:`RealNode` starts and stops them.

Order matters: :meth:`RealNode.prepare` (before the API server starts: the namespaces, the
relay and the API server's egress selector) and :meth:`RealNode.start` (once the API server
answers). :meth:`RealNode.stop` undoes everything on every path, and a crashed run's leftovers
are removed by the next :meth:`prepare` (see :mod:`.host`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..net import free_ports, wait_until
from ..process import Component
from . import addons, configs, host, netns
from .network import API_SERVER_IP, LINK_CIDR, NODE_IP, POD_CIDR, NodeNetwork

SUPPORT_DIR = Path(__file__).resolve().parents[2]
"""``tests/support``: on the relay's ``PYTHONPATH``."""


@dataclass(frozen=True)
class NodeImage:
    """An image archive loaded into the node's containerd before kubelet starts."""

    reference: str
    archive: Path


@dataclass(frozen=True)
class NodeBinaries:
    """Where the node's programs are."""

    kubelet: Path
    kube_proxy: Path
    kube_router: Path


@dataclass(frozen=True)
class ApiAccess:
    """How the node's programs reach and authenticate to the API server."""

    port: int
    ca_file: Path
    write_kubeconfig: Callable[[Path, str, str], Path]
    """``(path, name of the identity, server URL) -> path`` for the node's kubeconfigs."""
    registry_port: int | None = None
    """The image registry's port on the host's loopback, relayed to the node's."""
    registry_hosts: str = ""
    """containerd's ``hosts.toml`` for that registry (its CA)."""


@dataclass
class RealNode:
    """A real Kubernetes node (the harness's), labelled ``pando.dev/node=real`` and tainted."""

    name: str
    work_dir: Path
    binaries: NodeBinaries
    images: Sequence[NodeImage]
    sandbox_image: str
    coredns_image: str
    start_timeout: float = 120.0
    components: dict[str, Component] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.prefix = f"pando-{os.getpid()}-"
        self.network = NodeNetwork.named(self.prefix)
        self.dirs = configs.NodeDirs(self.work_dir)
        self.cgroup_root = f"/pando-{os.getpid()}"
        self.egress_socket = self.work_dir / "egress.sock"
        self._record: host.HostRecord | None = None
        self._ports = dict(zip(("kubelet", "proxy", "proxy-metrics", "router"),
                               free_ports(4), strict=True))  # fmt: skip

    @property
    def local_ports(self) -> dict[str, int]:
        """The ports the node's programs serve on the node namespace's loopback: ``kubelet``
        (healthz), ``proxy`` (kube-proxy's healthz), ``proxy-metrics``, ``router`` (health)."""
        return dict(self._ports)

    # ------------------------------------------------------------------ before the API server

    def apiserver_args(self) -> list[str]:
        """Flags the API server needs to reach the node (through the relay)."""
        config = self.work_dir / "egress-selector.yaml"
        return [f"--egress-selector-config-file={config}"]

    def prepare(self, api: ApiAccess) -> None:
        """Clean a dead run's leftovers, make the namespaces and start the relay."""
        host.clean_leftovers()
        for d in (self.dirs.config, self.dirs.cni_conf, self.dirs.cni_ipam, self.dirs.kubelet,
                  self.dirs.containerd, self.dirs.pod_logs, self.work_dir / "logs"):  # fmt: skip
            d.mkdir(parents=True, exist_ok=True)
        self._record = host.record(self.prefix, self.work_dir, self.cgroup_root)
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
        forwards = [
            {"listen_netns": self.network.node, "listen": f"127.0.0.1:{api.port}",
             "target": f"127.0.0.1:{api.port}"},
            {"listen_netns": self.network.outside, "listen": f"{API_SERVER_IP}:{api.port}",
             "target": f"127.0.0.1:{api.port}"},
        ]  # fmt: skip
        if api.registry_port is not None:
            forwards.append(
                {"listen_netns": self.network.node, "listen": f"127.0.0.1:{api.registry_port}",
                 "target": f"127.0.0.1:{api.registry_port}"}
            )  # fmt: skip
        relay_config = self.dirs.config / "relay.json"
        ready = self.work_dir / "relay.ready"
        relay_config.write_text(
            json.dumps(
                {
                    "forwards": forwards,
                    "connect_proxy": {
                        "socket": str(self.egress_socket),
                        "routes": {LINK_CIDR: self.network.node, POD_CIDR: self.network.node},
                    },
                    "ready_file": str(ready),
                }
            )
        )
        env = {**os.environ, "PYTHONPATH": str(SUPPORT_DIR)}
        self._start(
            "relay",
            [sys.executable, "-m", "localcluster.realnode.relay", str(relay_config)],
            env=env,
            in_node=False,
        )
        self._await("relay ready", ready.exists, time.monotonic())
        self._write_node_files(api)

    def _write_node_files(self, api: ApiAccess) -> None:
        d = self.dirs
        server = f"https://127.0.0.1:{api.port}"
        (d.config / "containerd.toml").write_text(
            configs.containerd_config(d, sandbox_image=self.sandbox_image)
        )
        (d.cni_conf / "10-pando.conflist").write_text(configs.cni_config(d))
        if api.registry_port is not None:
            address = f"127.0.0.1:{api.registry_port}"
            hosts = d.registry_hosts / address
            hosts.mkdir(parents=True, exist_ok=True)
            (hosts / "hosts.toml").write_text(api.registry_hosts)
        # Pods of dnsPolicy Default read this: no resolver outside the cluster.
        (d.config / "resolv.conf").write_text("options ndots:1\n")
        (d.config / "kubelet.json").write_text(
            configs.kubelet_config(
                d,
                ca_file=api.ca_file,
                cgroup_root=self.cgroup_root,
                taints=[configs.REAL_NODE_TAINT],
                healthz_port=self._ports["kubelet"],
            )
        )
        api.write_kubeconfig(d.config / "kubelet.kubeconfig", f"system:node:{self.name}", server)
        api.write_kubeconfig(d.config / "admin.kubeconfig", "admin", server)
        (d.config / "kube-proxy.json").write_text(
            configs.kube_proxy_config(
                kubeconfig=d.config / "admin.kubeconfig",
                node_name=self.name,
                healthz_port=self._ports["proxy"],
                metrics_port=self._ports["proxy-metrics"],
            )
        )

    # ------------------------------------------------------------------ once the API server answers

    def start(self, rest: Any) -> None:
        """Start containerd, load the images, start kubelet, kube-proxy, kube-router, and
        CoreDNS; return when the node is Ready and DNS answers."""
        t0 = time.monotonic()
        d = self.dirs
        self._start("containerd", ["containerd", "--config", str(d.config / "containerd.toml")])
        self._await("containerd up", d.containerd_socket.exists, t0)
        for image in self.images:
            self._ctr("images", "import", "--no-unpack", str(image.archive))
        self.timings["images loaded"] = round(time.monotonic() - t0, 2)
        host.make_cgroup_root(self.cgroup_root)
        subprocess.run(["mount", "--bind", str(d.kubelet), str(d.kubelet)], check=True)
        subprocess.run(["mount", "--make-rshared", str(d.kubelet)], check=True)
        self._start(
            "kubelet",
            [
                str(self.binaries.kubelet),
                f"--config={d.config / 'kubelet.json'}",
                f"--kubeconfig={d.config / 'kubelet.kubeconfig'}",
                f"--root-dir={d.kubelet}",
                f"--cert-dir={d.kubelet / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={NODE_IP}",
                f"--node-labels={configs.REAL_NODE_LABEL}=real",
                "--v=1",
            ],
        )
        self._await("node registered", lambda: rest.get(f"/api/v1/nodes/{self.name}")[0] == 200, t0)
        # kube-router reads the node's pod range from its spec.
        rest.request(
            "PATCH",
            f"/api/v1/nodes/{self.name}",
            {"spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]}},
            content_type="application/strategic-merge-patch+json",
        )
        self._start(
            "kube-proxy",
            [str(self.binaries.kube_proxy), f"--config={d.config / 'kube-proxy.json'}", "--v=1"],
        )
        self._start(
            "kube-router",
            [
                str(self.binaries.kube_router),
                f"--kubeconfig={d.config / 'admin.kubeconfig'}",
                f"--hostname-override={self.name}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--run-loadbalancer=false",
                "--enable-cni=false",
                "--enable-ipv6=false",
                f"--health-port={self._ports['router']}",
                "--metrics-port=0",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--iptables-sync-period=5s",
                "--v=1",
            ],
        )
        self._await("node ready", lambda: _node_ready(rest, self.name), t0)
        for doc in (addons.runtime_class("real"), *addons.coredns_objects(self.coredns_image)):
            _create(rest, doc)
        self._await("cluster DNS ready", lambda: _pod_ready(rest, "kube-system", "coredns"), t0)
        self.timings["total"] = round(time.monotonic() - t0, 2)

    def publish_api_endpoint(self, rest: Any, port: int) -> None:
        """Point the ``kubernetes`` Service at the relay for pods (see :mod:`.addons`)."""
        _create(rest, addons.kubernetes_endpoints(port))

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Stop every program, then remove the namespaces, mounts and cgroups and restore
        the host's settings."""
        for name in ("kube-router", "kube-proxy", "kubelet", "containerd", "relay"):
            component = self.components.get(name)
            if component is not None:
                component.stop(5.0)
        if self._record is not None:
            host.undo(self._record, self.network)
            self._record = None
        self.components.clear()

    # ------------------------------------------------------------------ helpers

    def _start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        in_node: bool = True,
    ) -> Component:
        full = netns.command(self.network.node, argv) if in_node else list(argv)
        component = Component(
            name, full, self.work_dir / "logs" / f"{name}.log", cwd=self.work_dir,
            env=dict(env) if env is not None else None,
        )  # fmt: skip
        component.start()
        self.components[name] = component
        return component

    def _ctr(self, *args: str) -> str:
        argv = ["ctr", "--address", str(self.dirs.containerd_socket), "--namespace", "k8s.io",
                *args]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def _dead(self) -> str | None:
        for c in self.components.values():
            if (code := c.exit_code()) is not None:
                return f"{c.name} exited with code {code}:\n{c.tail(30)}"
        return None

    def _await(self, what: str, check: Callable[[], bool], t0: float) -> None:
        remaining = max(0.0, t0 + self.start_timeout - time.monotonic())
        if not wait_until(check, timeout=remaining, interval=0.2, abort=self._dead):
            raise RuntimeError(f"real node {self.name}: timed out: {what}\n{self.logs()}")
        self.timings[what] = round(time.monotonic() - t0, 2)

    def logs(self, lines: int = 30) -> str:
        """The tail of each program's log, for failure reports."""
        return "\n".join(f"----- {c.name} -----\n{c.tail(lines)}" for c in self.components.values())


def _create(rest: Any, doc: dict[str, Any]) -> None:
    api = "api/v1" if doc["apiVersion"] == "v1" else f"apis/{doc['apiVersion']}"
    kind = doc["kind"].lower()
    plural = {"endpointslice": "endpointslices", "runtimeclass": "runtimeclasses"}.get(
        kind, kind + "s"
    )
    ns = doc["metadata"].get("namespace")
    path = f"/{api}/namespaces/{ns}/{plural}" if ns else f"/{api}/{plural}"
    status, body = rest.post(path, doc)
    if status not in (201, 409):
        raise RuntimeError(f"creating {doc['kind']} {doc['metadata']['name']}: {status} {body}")


def _node_ready(rest: Any, name: str) -> bool:
    status, body = rest.get(f"/api/v1/nodes/{name}")
    if status != 200:
        return False
    conditions = body.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _pod_ready(rest: Any, ns: str, name: str) -> bool:
    status, body = rest.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    if status != 200:
        return False
    conditions = body.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
