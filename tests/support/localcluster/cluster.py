"""The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
and metrics-server (behind the apiserver's aggregation layer, serving ``metrics.k8s.io``).

Everything lives in one temporary work directory::

    pki/            CA, serving and client certificates, service-account key, tokens.csv
    logs/           one log file per component
    audit/          the API server's audit policy and log (writes only: see :mod:`.audit`)
    etcd/           etcd's data
    kwok/           kwok.yaml, the fake pods' CRI log file (pods.log) and exec work dir
    admin.kubeconfig, restricted.kubeconfig, admin-token.kubeconfig
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import json
import os
import shutil
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from .audit import audit_args
from .binaries import BINARIES, Binaries, find_binaries
from .errors import ClusterError, ClusterStartError
from .kubeconfig import write_kubeconfig
from .kwok import cri_log_line, kwok_config
from .net import free_ports, retry_on_taken_port, wait_until
from .nodes import DEFAULT_NODES, NodeSpec, Taint
from .pki import FRONT_PROXY_CLIENT, Pki, issue_client_cert, make_pki
from .process import Component, tail
from .realnode.nodeset import RealNodeSet
from .realnode.stack import ApiAccess, RealNode
from .registry import LocalRegistry
from .rest import Rest

CONTEXT = "pando-local"
"""Context name of the admin kubeconfig."""
SERVICE_CIDR = "10.96.0.0/16"
ENV_KEEP = "PANDO_LOCALCLUSTER_KEEP"
"""Set to 1 to keep the work directory after teardown (for debugging)."""
START_ORDER = BINARIES
"""One component per binary, started in the order the binaries are listed."""
RESTARTABLE = ("etcd", "kube-apiserver", "kwok")
"""Components with a health check, so :meth:`LocalCluster.restart` knows when they are back."""
METRICS_RESOLUTION = "10s"
"""How often metrics-server scrapes (its minimum); CPU needs two scrapes to be known."""


class LocalCluster:
    """A throw-away Kubernetes control plane on 127.0.0.1 with kwok-simulated nodes.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`::

        with LocalCluster() as cluster:
            print(cluster.kubeconfig)
    """

    def __init__(
        self,
        *,
        nodes: Sequence[NodeSpec] = DEFAULT_NODES,
        restricted_user: str = "alice",
        name: str = CONTEXT,
        work_dir: Path | None = None,
        binaries: Binaries | None = None,
        start_timeout: float = 120.0,
        stop_timeout: float = 5.0,
        keep_work_dir: bool | None = None,
        real_node: bool = False,
        minor: str | None = None,
        real_nodes: int = 0,
    ) -> None:
        self.nodes = list(nodes)
        self.minor = minor
        """The Kubernetes minor of the control plane (``None``: the newest, the default build)."""
        self.real_nodes_wanted = max(real_nodes, 1 if real_node else 0)
        """How many real nodes to run (containerd, kubelet, ...; see :mod:`.realnode`)."""
        self.real_node_set: RealNodeSet | None = None
        """The real nodes, their network and relay, when any were wanted."""
        self.real_node: RealNode | None = None
        """The first real node (the only one, unless more were wanted)."""
        self.registry: LocalRegistry | None = None
        """With a real node: the image registry its containerd pulls from (TLS, a password)."""
        self.restricted_user = restricted_user
        self.binaries = binaries
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.keep_work_dir = (
            os.environ.get(ENV_KEEP) == "1" if keep_work_dir is None else keep_work_dir
        )
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="pando-localcluster-"))
        self.name = name
        self.context = name
        """The admin kubeconfig's context; every entry of the kubeconfigs is named after it,
        so the kubeconfigs of several clusters merge without a clash."""
        self.kubeconfig = self.work_dir / "admin.kubeconfig"
        self.restricted_kubeconfig = self.work_dir / "restricted.kubeconfig"
        self.token_kubeconfig = self.work_dir / "admin-token.kubeconfig"
        self.logs_dir = self.work_dir / "logs"
        self.audit_log = self.work_dir / "audit" / "audit.log"
        """The API server's audit log (writes only); read it with ``read_audit_log``."""
        self.logs_file = self.work_dir / "kwok" / "pods.log"
        """CRI-format file served as the log of every fake pod; append with :meth:`append_log`."""
        self.exec_dir = self.work_dir / "kwok" / "exec"
        """Work directory of commands run by ``exec`` into a fake pod (they run on this host)."""
        self.components: dict[str, Component] = {}
        self.ports: dict[str, int] = {}
        self.timings: dict[str, float] = {}
        """Seconds from the start of :meth:`start` to each readiness milestone."""
        self.server = ""
        self._pki: Pki | None = None
        self._rest: Rest | None = None
        self._detached = False
        self._stopped = False

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, detach: bool = False, stream_build_output: bool = False) -> Self:
        """Start every component and wait until the cluster is usable.

        With ``detach``, the components outlive this Python process (see :meth:`state`).
        On failure the tail of each component log is printed, everything is stopped and
        :class:`ClusterStartError` is raised.
        """
        if self.components:
            raise ClusterError("cluster already started")
        self._detached = detach
        t0 = time.monotonic()
        if self.binaries is None:
            try:
                self.binaries = find_binaries(stream_output=stream_build_output, minor=self.minor)
            except BaseException:
                self.stop()  # removes the (still empty) work dir
                raise
        self.timings["binaries"] = round(time.monotonic() - t0, 2)

        def attempt() -> None:
            self._prepare()
            self._start_components(t0)

        try:
            retry_on_taken_port(
                attempt,
                reset=self._undo_start,
                output=lambda failure: f"{failure}\n{self.component_logs()}",
            )
        except KeyboardInterrupt:
            self.stop()
            raise
        except BaseException as exc:
            report = self.component_logs()
            sys.stderr.write(f"local cluster failed to start: {exc}\n{report}\n")
            self.stop()
            raise ClusterStartError(f"{exc}\n{report}") from exc
        if not detach:
            atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Stop every component in reverse start order (SIGTERM, then SIGKILL)."""
        atexit.unregister(self.stop)
        if self.real_node_set is not None:
            self.real_node_set.stop()
            self.real_node_set = self.real_node = None
        if self.registry is not None:
            self.registry.stop()
            self.registry = None
        self._stop_each()
        self.components.clear()
        if self._own_work_dir and not self.keep_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _undo_start(self) -> None:
        """Undo a start that failed for a port taken meanwhile, so the next chooses anew.

        Its components stop, etcd's data goes (it names the old peer address) and their logs
        are set aside, so the next attempt's failure report is its own.
        """
        if self.real_node is not None:
            self.real_node.stop()
            self.real_node = None
        if self.registry is not None:
            self.registry.stop()
            self.registry = None
        self._stop_each()
        self.components.clear()
        shutil.rmtree(self.work_dir / "etcd", ignore_errors=True)
        for log in self.logs_dir.glob("*.log"):
            log.replace(log.with_suffix(".port-taken"))

    def _stop_each(self) -> None:
        for name in reversed(START_ORDER):
            component = self.components.get(name)
            if component is not None:
                component.stop(self.stop_timeout)

    def stop_components(self) -> None:
        """Stop every component as a failed control plane would, keeping everything else.

        The work directory, etcd's data, the certificates and the ports stay, so
        :meth:`start_components` brings the same cluster back at the same address.
        """
        if not self.components:
            raise ClusterError("cluster not started")
        self._stop_each()
        # Unstarted twins: the ended processes must not read as components that died.
        self.components = {
            name: Component(c.name, c.argv, c.log_path, cwd=c.cwd, env=c.env)
            for name, c in self.components.items()
        }
        self._stopped = True

    def start_components(self) -> Self:
        """Start the components of a cluster stopped by :meth:`stop_components` again.

        Same data, same ports, same credentials; returns once the cluster is usable again
        (its nodes Ready and the metrics API Available).
        """
        if not self._stopped:
            raise ClusterError("cluster not stopped by stop_components()")
        self._stopped = False
        try:
            self._start_components(time.monotonic(), fresh=False)
        except BaseException as exc:
            report = self.component_logs()
            raise ClusterStartError(f"{exc}\n{report}") from exc
        return self

    # ----------------------------------------------------------------- faults

    def component(self, name: str) -> Component:
        """The running component ``name`` (one of :data:`RESTARTABLE`, or any other)."""
        try:
            return self.components[name]
        except KeyError:
            raise ClusterError(
                f"no component {name!r} (started: {sorted(self.components)})"
            ) from None

    def restart(
        self, name: str, *, crash: bool = True, down_for: float = 0.0, timeout: float = 60.0
    ) -> float:
        """Stop ``name`` (SIGKILL when ``crash``, else SIGTERM), wait ``down_for`` seconds, start
        it again with the same flags and data, and wait until it answers again.

        Returns the seconds from the start to healthy again. Only the components of
        :data:`RESTARTABLE` have a health check; others are only restarted.
        """
        component = self.component(name)
        if crash:
            component.kill()
        else:
            component.stop(self.stop_timeout)
        if down_for > 0:
            time.sleep(down_for)
        started = time.monotonic()
        component.start(detach=self._detached)
        self.wait_healthy(name, timeout=timeout)
        return time.monotonic() - started

    def pause(self, name: str) -> None:
        """SIGSTOP ``name``: it hangs with its sockets open (connections stall, none is refused)."""
        self.component(name).pause()

    def resume(self, name: str) -> None:
        """SIGCONT ``name`` after :meth:`pause`."""
        self.component(name).resume()

    @contextlib.contextmanager
    def paused(self, name: str) -> Iterator[None]:
        """``name`` is paused for the block and resumed on every way out."""
        self.pause(name)
        try:
            yield
        finally:
            self.resume(name)

    def healthy(self, name: str) -> bool:
        """Whether ``name`` answers its health check (a running process for the others)."""
        checks: dict[str, Callable[[], bool]] = {
            "etcd": lambda: _http_ok(f"http://127.0.0.1:{self.ports['etcd']}/health"),
            "kube-apiserver": lambda: self.rest.request("GET", "/readyz", timeout=2)[0] == 200,
            "kwok": lambda: all(self.node_ready(n.name) for n in self.nodes),
        }
        check = checks.get(name)
        running = self.component(name).running()
        return running and (check is None or check())

    def wait_healthy(self, name: str, *, timeout: float = 60.0) -> None:
        """Wait until :meth:`healthy`; :class:`ClusterError` with its log tail otherwise."""
        if not wait_until(lambda: self.healthy(name), timeout=timeout):
            readyz = self.rest.request("GET", "/readyz?verbose", timeout=5)
            raise ClusterError(
                f"{name} not healthy {timeout:.0f} s after its restart\n"
                f"readyz: {readyz}\n{self.component(name).tail()}"
            )

    # ----------------------------------------------------------------- setup

    def _prepare(self) -> None:
        for d in (self.logs_dir, self.exec_dir, self.work_dir / "etcd"):
            d.mkdir(parents=True, exist_ok=True)
        self.work_dir.chmod(0o700)
        self.logs_file.touch()
        names = (
            "etcd",
            "etcd-peer",
            "apiserver",
            "controller-manager",
            "scheduler",
            "kwok",
            "metrics-server",
        )
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        pki = self._pki = make_pki(self.work_dir / "pki", self.restricted_user)
        self._write_kubeconfig(self.kubeconfig, self.server, restricted=False)
        self._write_kubeconfig(self.restricted_kubeconfig, self.server, restricted=True)
        write_kubeconfig(
            self.token_kubeconfig,
            user=f"{self.name}-admin-token",
            context=f"{self.name}-token",
            cluster=self.name,
            token=pki.admin_token,
            server=self.server,
            ca_cert=pki.ca.cert,
        )
        assert self.binaries is not None
        kwok_yaml = self.work_dir / "kwok" / "kwok.yaml"
        kwok_yaml.write_text(
            kwok_config(
                port=self.ports["kwok"],
                stage_files=self.binaries.stages,
                metrics_files=self.binaries.metrics_documents,
                logs_file=self.logs_file,
                exec_dir=self.exec_dir,
            )
        )
        self._rest = Rest(self.server, pki.ca.cert, pki.admin.cert, pki.admin.key)
        if self.real_nodes_wanted:
            if not self.binaries.node:
                # A kubelet newer than its API server is outside Kubernetes' version skew.
                raise ClusterError(f"no real node on Kubernetes {self.minor}: only the newest")
            from .realnode.setup import make_real_nodes  # noqa: PLC0415 - builds images: only here

            self.real_node_set = make_real_nodes(
                self.work_dir / "node", self.binaries, self.real_nodes_wanted
            )
            self.real_node = self.real_node_set.nodes[0]
            self.registry = LocalRegistry.for_pki(pki, self.work_dir / "registry")
        for name in START_ORDER:
            self.components[name] = Component(
                name,
                self._argv(name, pki, kwok_yaml),
                self.logs_dir / f"{name}.log",
                cwd=self.exec_dir if name == "kwok" else self.work_dir,
            )

    def _write_kubeconfig(self, path: Path, server: str, *, restricted: bool) -> Path:
        pki = self._pki
        assert pki is not None
        identity = pki.restricted if restricted else pki.admin
        return write_kubeconfig(
            path,
            user=f"{self.name}-{self.restricted_user}" if restricted else f"{self.name}-admin",
            context=f"{self.name}-{self.restricted_user}" if restricted else self.context,
            cluster=self.name,
            client_cert=identity.cert,
            client_key=identity.key,
            server=server,
            ca_cert=pki.ca.cert,
        )

    def write_kubeconfig_for(self, server: str, *, restricted: bool, name: str) -> Path:
        """A kubeconfig of the admin (or the restricted) identity for another address.

        For a proxy in front of the API server: the server's certificate is verified as usual.
        """
        return self._write_kubeconfig(
            self.work_dir / f"{name}.kubeconfig", server, restricted=restricted
        )

    def _argv(self, name: str, pki: Pki, kwok_yaml: Path) -> list[str]:
        assert self.binaries is not None
        exe = str(self.binaries.path(name))
        p = self.ports
        nodes = self.real_node_set
        etcd_url = f"http://127.0.0.1:{p['etcd']}"
        peer_url = f"http://127.0.0.1:{p['etcd-peer']}"
        kube_auth = [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ]
        args: dict[str, list[str]] = {
            "etcd": [
                "--name=node0",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=node0={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            "kube-apiserver": [
                f"--etcd-servers={etcd_url}",
                "--etcd-prefix=/registry",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                f"--cert-dir={self.work_dir / 'pki'}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--token-auth-file={pki.tokens_csv}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
                *audit_args(self.audit_log.parent),
                # The aggregation layer, for metrics-server: it proxies with this client
                # certificate and metrics-server trusts the identity headers it carries.
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                # Kubelets (the real node's) take the admin's certificate.
                f"--kubelet-client-certificate={pki.admin.cert}",
                f"--kubelet-client-key={pki.admin.key}",
                *(nodes.apiserver_args() if nodes is not None else ()),
            ],
            "kube-controller-manager": [
                *kube_auth,
                f"--secure-port={p['controller-manager']}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca.cert}",
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--profiling=false",
                *(nodes.controller_manager_args() if nodes is not None else ()),
            ],
            "kube-scheduler": [*kube_auth, f"--secure-port={p['scheduler']}", "--profiling=false"],
            "kwok": [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={kwok_yaml}",
                f"--tls-cert-file={pki.kwok.cert}",
                f"--tls-private-key-file={pki.kwok.key}",
            ],
            "metrics-server": [
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['metrics-server']}",
                f"--tls-cert-file={pki.metrics_server.cert}",
                f"--tls-private-key-file={pki.metrics_server.key}",
                # kwok serves every node's kubelet-like metrics at 127.0.0.1:<its port>, under
                # the path each node's annotation names, with a certificate of our CA.
                "--kubelet-preferred-address-types=InternalIP",
                "--kubelet-use-node-status-port",
                f"--kubelet-certificate-authority={pki.ca.cert}",
                f"--metric-resolution={METRICS_RESOLUTION}",
                "--kubelet-request-timeout=5s",  # must be shorter than the resolution
            ],
        }
        return [exe, *args[name]]

    def _start_components(self, t0: float, *, fresh: bool = True) -> None:
        """Start each component and wait for each milestone; ``fresh``: a new cluster (the
        metrics API and the nodes are written; a restarted one has them in etcd)."""
        comps = self.components
        deadline = t0 + self.start_timeout

        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        def await_(what: str, check: Callable[[], bool]) -> None:
            if not wait_until(check, timeout=remaining(), abort=self._dead_component):
                raise ClusterStartError(f"timed out after {self.start_timeout:.0f} s: {what}")
            self.timings[what] = round(time.monotonic() - t0, 2)

        if fresh and self.real_node_set is not None:
            assert self.registry is not None
            self.registry.start()
            self.real_node_set.prepare(self._node_api_access(self.registry))
            self.timings["real node prepared"] = round(time.monotonic() - t0, 2)
        comps["etcd"].start(detach=self._detached)
        await_("etcd healthy", lambda: _http_ok(f"http://127.0.0.1:{self.ports['etcd']}/health"))
        comps["kube-apiserver"].start(detach=self._detached)
        await_("apiserver ready", lambda: self.rest.get("/readyz")[0] == 200)
        for name in ("kube-controller-manager", "kube-scheduler", "kwok", "metrics-server"):
            comps[name].start(detach=self._detached)
        if fresh:
            self._register_metrics_api()
            for node in self.nodes:
                self._create_node(node)
        for port_name in ("controller-manager", "scheduler"):
            url = f"https://127.0.0.1:{self.ports[port_name]}/healthz"
            await_(f"{port_name} healthy", functools.partial(_http_ok, url))
        await_("nodes ready", lambda: all(self.node_ready(n.name) for n in self.nodes))
        sa = "/api/v1/namespaces/default/serviceaccounts/default"
        await_("default service account", lambda: self.rest.get(sa)[0] == 200)
        await_("metrics API available", self.metrics_api_available)
        if fresh and self.real_node_set is not None:
            self.real_node_set.publish_api_endpoint(self.rest, self.ports["apiserver"])
            self.real_node_set.start(self.rest)
            self.timings["real node ready"] = round(time.monotonic() - t0, 2)
        self.timings["total"] = round(time.monotonic() - t0, 2)

    def _node_api_access(self, registry: LocalRegistry) -> ApiAccess:
        pki = self._pki
        assert pki is not None

        def kubeconfig(path: Path, identity: str, server: str) -> Path:
            if identity == "admin":
                cert = pki.admin
            else:  # a node's own identity, for the Node authorizer
                node = identity.rsplit(":", 1)[-1]
                cert = issue_client_cert(pki, f"node-{node}", f"/O=system:nodes/CN={identity}")
            return write_kubeconfig(
                path,
                user=f"{self.name}-{identity}",
                context=self.name,
                cluster=self.name,
                client_cert=cert.cert,
                client_key=cert.key,
                server=server,
                ca_cert=pki.ca.cert,
            )

        return ApiAccess(
            port=self.ports["apiserver"],
            ca_file=pki.ca.cert,
            write_kubeconfig=kubeconfig,
            registry_port=registry.port,
            registry_hosts=registry.hosts_toml(),
        )

    def _register_metrics_api(self) -> None:
        """Serve ``metrics.k8s.io`` through metrics-server, as a cluster's add-on would.

        The APIService names a Service; an ExternalName Service lets the aggregation layer
        reach a process on this host rather than a pod.
        """
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "metrics-server", "namespace": "kube-system"},
            "spec": {
                "type": "ExternalName",
                "externalName": "127.0.0.1",
                "ports": [{"name": "https", "port": self.ports["metrics-server"]}],
            },
        }
        assert self._pki is not None
        api_service = {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "service": {
                    "name": "metrics-server",
                    "namespace": "kube-system",
                    "port": self.ports["metrics-server"],
                },
                "caBundle": base64.b64encode(self._pki.ca.cert.read_bytes()).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        }
        for path, body in (
            ("/api/v1/namespaces/kube-system/services", service),
            ("/apis/apiregistration.k8s.io/v1/apiservices", api_service),
        ):
            status, answer = self.rest.post(path, body)
            if status != 201:
                raise ClusterError(f"registering the metrics API failed: HTTP {status}: {answer}")

    def metrics_api_available(self) -> bool:
        """Whether the aggregation layer reports ``metrics.k8s.io`` Available."""
        path = "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io"
        status, body = self.rest.get(path)
        if status != 200 or not isinstance(body, dict):
            return False
        conditions = body.get("status", {}).get("conditions") or []
        return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)

    def _dead_component(self) -> str | None:
        for c in self.components.values():
            if c.proc is not None and (code := c.exit_code()) is not None:
                return f"{c.name} exited with code {code}"
        return None

    # ----------------------------------------------------------------- nodes and logs

    @property
    def rest(self) -> Rest:
        """An admin client for the harness's own requests."""
        if self._rest is None:
            raise ClusterError("cluster not started")
        return self._rest

    def _create_node(self, node: NodeSpec) -> None:
        status, body = self.rest.post("/api/v1/nodes", node.manifest())
        if status != 201:
            raise ClusterError(f"creating node {node.name} failed: HTTP {status}: {body}")

    def node_ready(self, name: str) -> bool:
        """Whether node ``name`` exists and its Ready condition is True."""
        status, body = self.rest.get(f"/api/v1/nodes/{name}")
        if status != 200 or not isinstance(body, dict):
            return False
        conditions = body.get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def add_node(
        self,
        name: str,
        cpu: str | int = "4",
        memory: str = "8Gi",
        *,
        pods: int = 110,
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Taint] | None = None,
        wait: bool = True,
        timeout: float = 30.0,
    ) -> NodeSpec:
        """Create a fake node of the given size (labelled ``type=kwok``) and wait until Ready."""
        spec = NodeSpec(name, str(cpu), memory, pods, dict(labels or {}), tuple(taints or ()))
        self._create_node(spec)
        self.nodes.append(spec)
        if wait and not wait_until(lambda: self.node_ready(name), timeout=timeout):
            logs = self.component_logs()
            raise ClusterError(f"node {name} not Ready after {timeout:.0f} s\n{logs}")
        return spec

    def append_log(self, *lines: str, stream: str = "stdout") -> None:
        """Append lines to :attr:`logs_file`, which every fake pod serves as its log."""
        with self.logs_file.open("a") as f:
            for line in lines:
                f.write(cri_log_line(line, stream))

    def component_logs(self, lines: int = 40) -> str:
        """The tail of each component's log, for failure reports."""
        parts = []
        for name in START_ORDER:
            log = self.logs_dir / f"{name}.log"
            if log.exists():
                parts.append(f"----- {name} ({log}) -----\n{tail(log, lines)}")
        return "\n".join(parts)

    def state(self) -> dict[str, Any]:
        """What ``python -m localcluster down/status`` needs to find a detached cluster."""
        return {
            "work_dir": str(self.work_dir),
            "server": self.server,
            "name": self.name,
            "context": self.context,
            "kubeconfig": str(self.kubeconfig),
            "restricted_kubeconfig": str(self.restricted_kubeconfig),
            "restricted_user": self.restricted_user,
            "token_kubeconfig": str(self.token_kubeconfig),
            "logs_file": str(self.logs_file),
            "exec_dir": str(self.exec_dir),
            "ports": self.ports,
            "timings": self.timings,
            "components": [
                {"name": c.name, "pid": c.pid, "exe": c.argv[0], "log": str(c.log_path)}
                for c in self.components.values()
            ],
        }

    def write_state(self, path: Path) -> None:
        """Write :meth:`state` as JSON to ``path``."""
        path.write_text(json.dumps(self.state(), indent=2) + "\n")


def _http_ok(url: str) -> bool:
    """GET ``url`` (TLS not verified: only local health endpoints) and report a 200."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:  # noqa: S310 - http(s) only
            return int(resp.status) == 200
    except (OSError, urllib.error.URLError):
        return False
