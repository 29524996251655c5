"""How dockerd is started inside an engine's namespaces: the wrapper and the flags.

dockerd runs as ``nsenter --net=<engine namespace> -- unshare --mount -- sh -c WRAPPER``:
the network namespace is the harness's; the mount namespace is dockerd's alone (private
propagation), so nothing it mounts reaches the host. The wrapper, in that mount namespace:

* mounts a fresh sysfs (it shows the engine namespace's interfaces, not the host's) and, as
  that hides the host's cgroup mounts, a tmpfs on ``/sys/fs/cgroup`` with each of the host's
  cgroup hierarchies mounted again below it (``ip netns exec`` does the first without the
  second, and dockerd then fails: "Devices cgroup isn't mounted");
* mounts a tmpfs on ``/run``: the host's ``/run/containerd/containerd.sock`` (if any) is
  hidden, so dockerd starts a containerd of its own, whose state lives and dies with it;
* binds a private ``/etc/docker`` (no ``daemon.json``, no registry certificates, its own key)
  and a private ``/etc/resolv.conf`` (containers ask a stand-in address, never the host's
  resolver);
* then execs dockerd, which keeps the process id the harness started.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from localcluster.realnode import netns

from .network import EngineNetwork

EXEC_ROOT = "/run/pando-docker"
"""dockerd's ``--exec-root``: on the wrapper's private ``/run``, gone with its processes."""
MOUNTINFO = Path("/proc/self/mountinfo")
_CGROUP_FS = "/sys/fs/cgroup"
_NOT_CONTROLLERS = {"rw", "ro", "nosuid", "nodev", "noexec", "relatime", "clone_children"}


@dataclass(frozen=True)
class DaemonFiles:
    """An engine's files on the host, all under its work directory."""

    work_dir: Path

    @property
    def socket(self) -> Path:
        """The API socket."""
        return self.work_dir / "docker.sock"

    @property
    def pidfile(self) -> Path:
        """dockerd's ``--pidfile``."""
        return self.work_dir / "docker.pid"

    @property
    def data_root(self) -> Path:
        """dockerd's ``--data-root`` (images, containers, volumes, containerd's content)."""
        return self.work_dir / "data"

    @property
    def etc_docker(self) -> Path:
        """Bound on ``/etc/docker`` for dockerd."""
        return self.work_dir / "etc-docker"

    @property
    def resolv_conf(self) -> Path:
        """Bound on ``/etc/resolv.conf`` for dockerd (its containers copy it)."""
        return self.work_dir / "resolv.conf"

    @property
    def log(self) -> Path:
        """dockerd's (and its containerd's) output."""
        return self.work_dir / "dockerd.log"

    @property
    def client_config(self) -> Path:
        """``DOCKER_CONFIG`` of the CLI runs (no user's ``~/.docker`` is read or written)."""
        return self.work_dir / "client"

    def make(self, nameserver: str) -> None:
        """Create the folders and the private files."""
        for d in (self.work_dir, self.data_root, self.etc_docker, self.client_config):
            d.mkdir(parents=True, exist_ok=True)
        self.resolv_conf.write_text(f"nameserver {nameserver}\n")


def cgroup_mounts(mountinfo: str | None = None) -> list[tuple[str, str, str]]:
    """The host's cgroup hierarchies under ``/sys/fs/cgroup``: (type, options, mount point).

    The options name the controllers to mount again (``none,name=systemd`` for a named
    hierarchy without controllers).
    """
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    found: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        fields, _, rest = line.partition(" - ")
        point = fields.split()[4]
        fstype, _, super_options = [*rest.split(), "", "", ""][:3]
        if not point.startswith(_CGROUP_FS + "/"):
            continue
        if fstype == "cgroup2":
            found.append(("cgroup2", "", point))
        elif fstype == "cgroup":
            wanted = [o for o in super_options.split(",") if o and o not in _NOT_CONTROLLERS]
            if wanted and all(o.startswith("name=") for o in wanted):
                wanted.insert(0, "none")
            found.append(("cgroup", ",".join(wanted), point))
    return found


def wrapper_script(files: DaemonFiles, mounts: list[tuple[str, str, str]]) -> str:
    """The shell run in dockerd's mount namespace before it (``"$@"`` is dockerd's argv)."""
    q = shlex.quote
    lines = [
        "set -eu",
        "mount -t sysfs sysfs /sys",
        f"mount -t tmpfs -o mode=755 cgroup {_CGROUP_FS}",
    ]
    for fstype, options, point in mounts:
        opts = f"-o {q(options)} " if options else ""
        lines += [f"mkdir -p {q(point)}", f"mount -t {fstype} {opts}{fstype} {q(point)}"]
    lines += [
        # Where /etc/resolv.conf leads (a link into /run where systemd-resolved runs): made
        # again on the fresh /run, so the bind below has a file to cover.
        "resolv=$(readlink -m /etc/resolv.conf)",
        "mount -t tmpfs -o mode=755 run /run",
        'mkdir -p "$(dirname "$resolv")" && { [ -e "$resolv" ] || : > "$resolv"; }',
        f"mount --bind {q(str(files.etc_docker))} /etc/docker",
        f'mount --bind {q(str(files.resolv_conf))} "$resolv"',
        'exec "$@"',
    ]
    return "\n".join(lines) + "\n"


def dockerd_argv(
    files: DaemonFiles,
    network: EngineNetwork,
    cgroup_parent: str,
    dockerd: str = "dockerd",
    extra: Sequence[str] = (),
    *,
    storage_driver: str = "overlay2",
) -> list[str]:
    """dockerd and its flags: every path, range and cgroup the engine's own (``extra``: more
    flags, such as a TLS listener's; ``storage_driver``: a graph driver, or with the
    containerd image store a containerd snapshotter, ``overlayfs``)."""
    return [
        dockerd,
        f"--host=unix://{files.socket}",
        f"--data-root={files.data_root}",
        f"--exec-root={EXEC_ROOT}",
        f"--pidfile={files.pidfile}",
        f"--storage-driver={storage_driver}",
        "--exec-opt=native.cgroupdriver=cgroupfs",
        f"--cgroup-parent={cgroup_parent}",
        f"--bip={network.bip}",
        f"--default-address-pool={network.address_pool}",
        "--iptables=true",
        "--ip-forward=true",
        "--shutdown-timeout=2",
        "--log-level=info",
        *extra,
    ]


def command(
    files: DaemonFiles,
    network: EngineNetwork,
    cgroup_parent: str,
    dockerd: str = "dockerd",
    extra: Sequence[str] = (),
    *,
    storage_driver: str = "overlay2",
) -> list[str]:
    """The whole command the harness runs: namespaces, the wrapper, dockerd."""
    script = wrapper_script(files, cgroup_mounts())
    argv = dockerd_argv(
        files, network, cgroup_parent, dockerd, extra, storage_driver=storage_driver
    )
    inner = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script,
             "pando-dockerd", *argv]  # fmt: skip
    return netns.command(network.engine, inner)
