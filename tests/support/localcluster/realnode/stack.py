"""One real node beside kwok's: containerd, kubelet, kube-proxy and kube-router in a network
namespace of the harness's. :class:`RealNode` starts and stops them.

A node is one of a set (:class:`~.nodeset.RealNodeSet`), which makes the namespaces, runs the
relay to the API server and adds cluster DNS: :meth:`RealNode.write_files` once the relay
runs, :meth:`RealNode.start` once the API server answers, :meth:`RealNode.stop` on every path.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..net import free_ports, wait_until
from ..process import Component
from . import configs, host, netns
from .network import NodeNetwork


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
    runsc: Path | None = None
    """gVisor's ``runsc``: containerd gets the runtime handler ``runsc`` (``None``: runc
    only)."""


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
    network: NodeNetwork
    """Its namespace (``network.node``), the outside one and its addresses."""
    cgroup_root: str
    heartbeat: configs.Heartbeat | None = None
    """How often it reports (``None``: kubelet's defaults)."""
    start_timeout: float = 120.0
    components: dict[str, Component] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.dirs = configs.NodeDirs(self.work_dir)
        self._ports = dict(zip(("kubelet", "proxy", "proxy-metrics", "router"),
                               free_ports(4), strict=True))  # fmt: skip

    @property
    def local_ports(self) -> dict[str, int]:
        """The ports the node's programs serve on the node namespace's loopback: ``kubelet``
        (healthz), ``proxy`` (kube-proxy's healthz), ``proxy-metrics``, ``router`` (health)."""
        return dict(self._ports)

    # ------------------------------------------------------------------ once the relay runs

    def write_files(self, api: ApiAccess) -> None:
        """Write the node's configuration files (its programs reach the API server through
        the relay on the namespace's loopback)."""
        d = self.dirs
        for directory in (d.config, d.cni_conf, d.cni_ipam, d.kubelet, d.containerd, d.pod_logs,
                          self.work_dir / "logs"):  # fmt: skip
            directory.mkdir(parents=True, exist_ok=True)
        net = self.network
        server = f"https://127.0.0.1:{api.port}"
        runsc = self.binaries.runsc
        wrapper = d.config / "runsc" if runsc is not None else None
        if runsc is not None and wrapper is not None:
            wrapper.write_text(configs.runsc_wrapper(runsc))
            wrapper.chmod(0o755)
        (d.config / "containerd.toml").write_text(
            configs.containerd_config(d, sandbox_image=self.sandbox_image, runsc=wrapper)
        )
        (d.cni_conf / "10-pando.conflist").write_text(
            configs.cni_config(d, pod_cidr=net.pod_cidr, gateway=net.pod_gateway)
        )
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
                node_ip=net.node_ip,
                heartbeat=self.heartbeat,
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
                node_ip=net.node_ip,
            )
        )

    # ------------------------------------------------------------------ once the API server answers

    def start(self, rest: Any) -> None:
        """Start containerd, load the images, start kubelet, kube-proxy and kube-router;
        return when the node is Ready."""
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
                f"--node-ip={self.network.node_ip}",
                f"--node-labels={configs.REAL_NODE_LABEL}=real",
                "--v=1",
            ],
        )
        self._await("node registered", lambda: rest.get(f"/api/v1/nodes/{self.name}")[0] == 200, t0)
        # kube-router reads the node's pod range from its spec.
        rest.request(
            "PATCH",
            f"/api/v1/nodes/{self.name}",
            {"spec": {"podCIDR": self.network.pod_cidr, "podCIDRs": [self.network.pod_cidr]}},
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
        self._await("node ready", lambda: node_ready(rest, self.name), t0)
        self.timings["total"] = round(time.monotonic() - t0, 2)

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Stop every program (the set removes the namespaces, mounts and cgroups)."""
        for name in ("kube-router", "kube-proxy", "kubelet", "containerd"):
            component = self.components.get(name)
            if component is not None:
                component.stop(5.0)
        self.components.clear()

    # ------------------------------------------------------------------ helpers

    def _start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
    ) -> Component:
        full = netns.command(self.network.node, argv)
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


def create(rest: Any, doc: dict[str, Any]) -> None:
    """Create ``doc`` with the admin's client (one that exists already is left as it is)."""
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


def node_ready(rest: Any, name: str) -> bool:
    """Whether node ``name``'s Ready condition is True."""
    status, body = rest.get(f"/api/v1/nodes/{name}")
    if status != 200:
        return False
    conditions = body.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_ready(rest: Any, ns: str, name: str) -> bool:
    """Whether pod ``ns/name``'s Ready condition is True."""
    status, body = rest.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    if status != 200:
        return False
    conditions = body.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
