"""The real node's configuration files, as text: pure builders, no I/O.

Every path they name is under the node's work directory, so nothing of the host's own
containerd, kubelet or CNI configuration is read or written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .network import NODE_IP, POD_CIDR, POD_GATEWAY, POD_RANGE

CNI_BIN_DIR = "/usr/lib/cni"
"""Where Debian's containernetworking-plugins puts the plugins."""
RUNTIME_HANDLER = "runc"
SANDBOX_HANDLER = "runsc"
"""containerd's handler running pods under gVisor: runc's shim with ``runsc`` as its binary."""
CLUSTER_DNS_IP = "10.96.0.10"
REAL_NODE_LABEL = "pando.dev/node"
REAL_NODE_TAINT = {"key": "pando.dev/real-node", "value": "true", "effect": "NoSchedule"}
POD_PIDS_LIMIT = 1024
"""kubelet's ``podPidsLimit``: processes (threads included) one pod may hold. Kubernetes has
no per-pod field for it; the adapter relies on the node's setting (docs/security.md)."""


@dataclass(frozen=True)
class Heartbeat:
    """How often a node says it is alive, and how soon the control plane calls it lost.

    kubelet renews its node's lease every quarter of ``lease_seconds`` and posts its status
    every ``status_update_seconds``; the controller manager marks the node's Ready condition
    Unknown once neither was heard of for ``grace_seconds`` (checking every
    ``monitor_seconds``). Kubernetes' defaults (40 s, 10 s, 50 s, 5 s) make a lost node known
    after almost a minute; the multi-node sets use shorter ones, still a few missed renewals
    long, so a busy machine does not lose a node that is merely slow.
    """

    lease_seconds: int = 10
    status_update_seconds: int = 4
    grace_seconds: int = 20
    monitor_seconds: int = 1

    def controller_manager_args(self) -> list[str]:
        """The controller manager's flags for it."""
        return [
            f"--node-monitor-grace-period={self.grace_seconds}s",
            f"--node-monitor-period={self.monitor_seconds}s",
        ]


@dataclass(frozen=True)
class NodeDirs:
    """The directories of one real node, all under ``root``."""

    root: Path

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def registry_hosts(self) -> Path:
        return self.containerd / "certs.d"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet(self) -> Path:
        """kubelet's root directory (a bind mount of itself, made shared)."""
        return self.root / "kubelet"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def pod_logs(self) -> Path:
        """The containers' logs: the node's own, not ``/var/log/pods``, which every kubelet on
        the machine garbage-collects of pods it does not know (another run's node included)."""
        return self.root / "pod-logs"


def containerd_config(dirs: NodeDirs, *, sandbox_image: str, runsc: Path | None = None) -> str:
    """containerd's ``config.toml``: its own root, state and sockets; the CRI plugin with
    ``restrict_oom_score_adj`` (this machine lacks CAP_SYS_RESOURCE), runc with cgroupfs,
    our CNI configuration, and registry hosts from ``certs.d``.

    ``runsc``: gVisor's runtime (through :func:`runsc_wrapper`), run as the handler
    :data:`SANDBOX_HANDLER` by containerd's runc shim with it as the binary, as Docker runs
    it. Not gVisor's own shim (``containerd-shim-runsc-v1``, built beside it), although
    gVisor documents that one for containerd: it sets its own ``oom_score_adj`` to -999 and
    fails to start when it may not, and this machine grants no CAP_SYS_RESOURCE (runc's shim
    only raises its score, which needs none). runsc still puts a pod's containers in one
    sandbox: it reads the CRI's annotations (the pause container's sandbox).
    """
    d = dirs.containerd
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    runtimes = f"{cri[1:-1]}.containerd.runtimes"
    sandbox = (
        f"""    [{runtimes}.{SANDBOX_HANDLER}]
      runtime_type = "io.containerd.runc.v2"
      [{runtimes}.{SANDBOX_HANDLER}.options]
        BinaryName = "{runsc}"
        Root = "{d / "runsc"}"
        SystemdCgroup = false
"""
        if runsc is not None
        else ""
    )
    return f"""\
version = 2
root = "{d / "root"}"
state = "{d / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{dirs.containerd_socket}"

[ttrpc]
  address = "{dirs.containerd_socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "opt"}"

{cri}
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_unprivileged_ports = true
  # Pods' network namespaces under our state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{dirs.cni_conf}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "{RUNTIME_HANDLER}"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{RUNTIME_HANDLER}]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{RUNTIME_HANDLER}.options]
        SystemdCgroup = false
{sandbox}  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{dirs.registry_hosts}"
"""


def runsc_wrapper(runsc: Path) -> str:
    """A shell script runc's shim runs as its binary: ``runsc``, fitted to that shim for the
    containers a pod adds to its sandbox.

    runsc gives such a container the output of ``runsc start`` and writes the sandbox's pid as
    its pid, while runc's shim gives a container its pipes at ``create``, reads a command's
    output to its end and takes the pid's exit for the container's. So ``create`` also starts
    a waiter (reparented to the shim, which reaps its children's children): it holds the
    container's pipes, waits for the container (``runsc wait``) and exits with its status,
    and its pid is the one written; ``start`` hands the container the waiter's pipes. A
    ``kill`` of a container that ended already says so in runc's words ("container not
    running"), which the shim takes for done (runsc's "sandbox is not running" it does not).
    """
    return f"""\
#!/bin/sh
RUNSC="{runsc}"
prev=""; cmd=""; root=""; bundle=""; pidfile=""; id=""
for arg in "$@"; do
  case "$prev" in
    --root) root=$arg ;;
    --bundle) bundle=$arg ;;
    --pid-file) pidfile=$arg ;;
  esac
  if [ -z "$cmd" ]; then
    case "$arg" in create|start|kill) cmd=$arg ;; esac
  fi
  prev=$arg; id=$arg
done
waiter="$root/$id.waiter"
if [ "$cmd" = create ] && [ -n "$pidfile" ] &&
    grep -q '"io.kubernetes.cri.container-type": *"container"' "$bundle/config.json"; then
  "$RUNSC" "$@" || exit $?
  (
    exec 0</dev/null
    until "$RUNSC" --root "$root" state "$id" 2>/dev/null |
        grep -Eq '"status": *"(running|stopped)"'; do
      sleep 0.1
    done
    out=$("$RUNSC" --root "$root" wait "$id" 2>/dev/null)
    code=$(echo "$out" | grep -o '"exitStatus": *[0-9]*' | grep -o '[0-9]*$')
    rm -f "$waiter"
    exit "${{code:-255}}"
  ) &
  echo $! > "$waiter"
  printf '%s' $! > "$pidfile"
  exit 0
fi
if [ "$cmd" = start ] && [ -f "$waiter" ]; then
  pid=$(cat "$waiter")
  exec "$RUNSC" "$@" </dev/null >"/proc/$pid/fd/1" 2>"/proc/$pid/fd/2"
fi
if [ "$cmd" = kill ]; then
  # runc's shim takes only runc's words for a container that ended already.
  out=$("$RUNSC" "$@" 2>&1) && exit 0
  case "$out" in *"is not running"*) echo "container not running" ;; *) echo "$out" ;; esac
  exit 1
fi
exec "$RUNSC" "$@"
"""


def cni_config(dirs: NodeDirs, *, pod_cidr: str = POD_CIDR, gateway: str = POD_GATEWAY) -> str:
    """A bridge network over the node's pod range, routed (not masqueraded) by the node
    namespace."""
    config = {
        "cniVersion": "0.4.0",
        "name": "pando",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr, "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(dirs.cni_ipam),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(config, indent=2) + "\n"


def kubelet_config(
    dirs: NodeDirs,
    *,
    ca_file: Path,
    cgroup_root: str,
    taints: Sequence[Mapping[str, str]],
    healthz_port: int,
    node_ip: str = NODE_IP,
    heartbeat: Heartbeat | None = None,
    cluster_domain: str = "cluster.local",
) -> str:
    """KubeletConfiguration for cgroup v1 with cgroupfs, on our containerd, serving on the
    node's address (the API server reaches it through the relay) and nothing else; each pod
    held to :data:`POD_PIDS_LIMIT` processes; its node's heartbeat as ``heartbeat`` says
    (``None``: kubelet's defaults)."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "containerRuntimeEndpoint": f"unix://{dirs.containerd_socket}",
        "address": node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        "resolvConf": str(dirs.config / "resolv.conf"),
        "clusterDNS": [CLUSTER_DNS_IP],
        "clusterDomain": cluster_domain,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "0%",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
        },
        "registerWithTaints": [dict(t) for t in taints],
        "serializeImagePulls": False,
        "maxPods": 110,
        "podPidsLimit": POD_PIDS_LIMIT,
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "containerLogMaxSize": "10Mi",
        "podLogsDir": str(dirs.pod_logs),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }
    if heartbeat is not None:
        config["nodeLeaseDurationSeconds"] = heartbeat.lease_seconds
        config["nodeStatusUpdateFrequency"] = f"{heartbeat.status_update_seconds}s"
    return json.dumps(config, indent=2) + "\n"


def kube_proxy_config(
    *,
    kubeconfig: Path,
    node_name: str,
    healthz_port: int,
    metrics_port: int,
    node_ip: str = NODE_IP,
) -> str:
    """kube-proxy in iptables mode (this kernel has no IPVS); no host-wide conntrack change."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": POD_RANGE,
        "hostnameOverride": node_name,
        "bindAddress": node_ip,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{node_ip}/32"],
        # 0 leaves the conntrack table's size and timeouts alone: they are not per namespace.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    return json.dumps(config, indent=2) + "\n"
