"""A real Docker Engine for tests: dockerd in network namespaces of the harness's, with its
own data, containerd, cgroups, bridge and address pool, and a stand-in outside world.

::

    with DockerEngine(work_dir) as engine:
        engine.docker("run", "--rm", engine.busybox, "echo", "hi")
        engine.api.ping()                      # the harness's client; adapters bring theirs
        engine.restart()                       # the daemon only: namespaces and data stay

:meth:`DockerEngine.open` cleans a crashed run's leftovers (:mod:`.records`), records what it
will change, makes the namespaces (:mod:`.network`), starts the stand-in server
(:mod:`.outside`) and dockerd (:mod:`.daemon`), and loads the busybox image.
:meth:`DockerEngine.close` undoes all of it. Several engines run at once, each in a slot of
its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from localcluster.net import wait_until
from localcluster.process import Component, tail
from localcluster.realnode import netns

from . import daemon, dns, outside, records
from .api import DockerApi, DockerApiError
from .engines import DEBIAN_ENGINE, EngineBinaries
from .images import BUSYBOX, BuiltImage, busybox_image
from .network import MAX_SLOTS, EngineNetwork, Outside
from .tls import EngineTls, make_engine_tls

DEBIAN_CLI = Path("/usr/bin/docker")
"""The CLI of Debian's ``docker.io`` (the engine's own version); else ``docker`` on PATH."""
CONTAINERD_SNAPSHOTTER = "containerd-snapshotter"
"""The feature that puts images in containerd's store (27 and 28; the default of fresh 29
installs): ``DockerEngine(features={CONTAINERD_SNAPSHOTTER: True})``."""

_slots: set[int] = set()
_slots_lock = threading.Lock()


class EngineError(RuntimeError):
    """The engine could not be started, or stopped cleanly."""


def _claim_slot() -> int:
    with _slots_lock:
        free = next((s for s in range(MAX_SLOTS) if s not in _slots), None)
        if free is None:
            raise EngineError(f"at most {MAX_SLOTS} engines run at once in one process")
        _slots.add(free)
        return free


def _release_slot(slot: int) -> None:
    with _slots_lock:
        _slots.discard(slot)


def docker_cli() -> str | None:
    """The docker CLI to run: Debian's if installed, else the one on PATH (None: neither)."""
    if os.access(DEBIAN_CLI, os.X_OK):
        return str(DEBIAN_CLI)
    return shutil.which("docker")


class DockerEngine:
    """One Docker Engine (Debian's dockerd 20.10, API 1.41, unless ``binaries`` names another)
    in namespaces of its own.

    Args:
        work_dir: Holds the socket, pidfile, data root, logs and private config files.
        start_timeout: Seconds a start may take before it fails with the daemon's log.
        preload: Image archives loaded at :meth:`open` besides the busybox image.
        tls: Serve the API over TLS too, on ``127.0.0.1:2376`` of the engine's namespace,
            client certificates required (:attr:`tls` holds the material, :mod:`.tls`).
        runtimes: OCI runtimes besides runc, by name: the binary and its arguments (gVisor's
            ``runsc``, see :mod:`.gvisor`), in the daemon's ``runtimes`` configuration.
        daemon_flags: More dockerd flags, after the harness's own (a later flag wins:
            ``--iptables=false`` for an engine that manages no firewall).
        features: The daemon configuration's ``features`` (``{"containerd-snapshotter": True}``:
            the containerd image store, 27 and 28).
        binaries: The engine release to run (:mod:`.engines`; default: Debian's).
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        start_timeout: float = 90.0,
        preload: Sequence[BuiltImage] = (),
        tls: bool = False,
        runtimes: Mapping[str, tuple[Path, Sequence[str]]] | None = None,
        daemon_flags: Sequence[str] = (),
        features: Mapping[str, bool] | None = None,
        binaries: EngineBinaries | None = None,
    ) -> None:
        self.binaries = binaries or DEBIAN_ENGINE
        """The release this engine runs (``.version``: ``20.10``, ``28.5``)."""
        self.slot = _claim_slot()
        self.prefix = f"pando-{os.getpid()}-"
        self.network = EngineNetwork(self.prefix, self.slot)
        self.files = daemon.DaemonFiles(work_dir)
        self.cgroup_parent = f"/pando-{os.getpid()}-docker{self.slot}"
        self.outside = Outside()
        self.api = DockerApi(self.files.socket)
        self.start_timeout = start_timeout
        self.busybox = BUSYBOX
        self.images: list[str] = []
        """The references :meth:`open` loaded (busybox and ``preload``): the harness's images,
        which :meth:`reset` keeps."""
        self.timings: dict[str, float] = {}
        """Seconds: ``namespaces``, ``daemon start`` (the first), ``daemon restart`` (the
        last), ``daemon stop`` (the last), ``image load`` (the last), ``open``."""
        self._preload = list(preload)
        self._serve_tls = tls
        self.runtimes = dict(runtimes or {})
        """The OCI runtimes the daemon has besides runc: name to (binary, arguments)."""
        self.daemon_flags = tuple(daemon_flags)
        """dockerd flags given beside the harness's own."""
        self.features = dict(features or {})
        """The daemon configuration's ``features``."""
        self.tls: EngineTls | None = None
        """The engine's CA and certificates once :meth:`open` made them (``tls=True``)."""
        self._daemon: Component | None = None
        self._httpd: Component | None = None
        self._dns: Component | None = None
        self._relays: dict[int, Component] = {}
        self._record: records.EngineRecord | None = None
        self._closed = False

    # ------------------------------------------------------------------ what tests use

    @property
    def socket_path(self) -> Path:
        """The API's Unix socket (reachable from the host's namespace: it is a file)."""
        return self.files.socket

    @property
    def base_url(self) -> str:
        """``unix:///...``: what ``DOCKER_HOST`` and most clients take."""
        return f"unix://{self.files.socket}"

    @property
    def netns(self) -> str:
        """The network namespace dockerd and its containers run in."""
        return self.network.engine

    @property
    def outside_netns(self) -> str:
        """The network namespace of the stand-in outside world."""
        return self.network.outside

    @property
    def docker_env(self) -> dict[str, str]:
        """The environment of a ``docker`` CLI run against this engine (and no other)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
        env["DOCKER_HOST"] = self.base_url
        env["DOCKER_CONFIG"] = str(self.files.client_config)
        return env

    def docker(
        self, *args: str, check: bool = True, timeout: float = 120.0, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the ``docker`` CLI against this engine; raise on failure when ``check``."""
        cli = docker_cli()
        if cli is None:
            raise EngineError("no docker CLI (apt-get install docker.io)")
        proc = subprocess.run(
            [cli, *args], env=self.docker_env, capture_output=True, text=True,
            timeout=timeout, input=stdin, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise EngineError(f"docker {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        return proc

    def run(
        self, *command: str, image: str | None = None, options: Sequence[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        """``docker run --rm --pull never [options] image command`` (exit code not checked)."""
        return self.docker(
            "run", "--rm", "--pull", "never", *options, image or self.busybox, *command,
            check=False,
        )  # fmt: skip

    def run_in_netns(
        self, argv: Sequence[str], *, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the engine's network namespace (``iptables -S``, ``ip route``)."""
        return subprocess.run(
            netns.command(self.netns, argv), capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip

    def reaches(
        self, address: str, port: int | None = None, *, network: str = "bridge", timeout: int = 3
    ) -> outside.Reach:
        """Whether a container on ``network`` gets a stand-in's answer from ``address``
        (``nc -w timeout``: a dropped connection costs that many seconds)."""
        script = outside.http_probe_script(address, port or self.outside.http_port, timeout)
        proc = self.run("sh", "-c", script, options=("--network", network))
        text = proc.stdout + proc.stderr
        return outside.Reach(outside.answered(proc.stdout), text)

    def namespace_reaches(self, address: str, port: int | None = None) -> outside.Reach:
        """Whether the engine's namespace itself gets a stand-in's answer from ``address``."""
        return outside.namespace_reaches(self.netns, address, port or self.outside.http_port)

    def dns_queries(self) -> list[dict[str, str]]:
        """Every question the stand-in DNS server got: ``name``, ``type``, ``client``."""
        return dns.read_log(self.files.work_dir / "dns-queries.jsonl")

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Move the calling thread into the engine's namespace for the block (a socket made
        there keeps the namespace: that is how the host reaches a container's address)."""
        with netns.entered(self.netns):
            yield

    def connect(self, address: str, port: int, timeout: float = 10.0) -> socket.socket:
        """A TCP connection to ``address:port`` made from the engine's namespace (a
        container's address on its network, say); blocking, ``timeout`` for the connect.

        Wrap it for async code with ``anyio.abc.SocketStream.from_socket`` (after
        ``setblocking(False)``).
        """
        with self.entered():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect((address, port))
        except OSError:
            sock.close()
            raise
        sock.settimeout(None)
        return sock

    def expose_host_port(self, port: int) -> str:
        """Make the host's ``127.0.0.1:port`` (say, the ``image_registry`` fixture's) answer
        at the same address inside the engine's namespace, through a relay process (nothing
        is routed); returns that address. dockerd pulls from the namespace it runs in."""
        if port not in self._relays:
            started = time.monotonic()
            relay, ready = outside.host_port_relay(self.netns, port, self.files.work_dir)
            relay.start()
            self._relays[port] = relay
            self._await(f"relay of port {port}", ready.exists, started)
        return f"127.0.0.1:{port}"

    def trust_registry(self, address: str, ca_cert: Path) -> None:
        """Have dockerd trust ``ca_cert`` for the registry at ``address`` (its private
        ``/etc/docker/certs.d``, read at each pull: no restart needed)."""
        folder = self.files.etc_docker / "certs.d" / address
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ca_cert, folder / "ca.crt")

    def load_image(self, archive: Path) -> list[str]:
        """Load a docker-archive tar through the API; the references loaded."""
        started = time.monotonic()
        loaded = self.api.load_image(archive)
        self.timings["image load"] = round(time.monotonic() - started, 3)
        return loaded

    def save_image(self, name: str, destination: Path) -> Path:
        """Write image ``name`` as a docker-archive tar (what ``docker save`` writes)."""
        return self.api.save_image(name, destination)

    def reset(self) -> None:
        """Remove every container, network (but the built-in three), volume and image that
        was not loaded by the harness: the engine as :meth:`open` left it."""
        ids = self.docker("ps", "--all", "--quiet").stdout.split()
        if ids:
            self.docker("rm", "--force", "--volumes", *ids)
        networks = self.docker("network", "ls", "--format", "{{.Name}}").stdout.split()
        extra = [n for n in networks if n not in ("bridge", "host", "none")]
        if extra:
            self.docker("network", "rm", *extra)
        volumes = self.docker("volume", "ls", "--quiet").stdout.split()
        if volumes:
            self.docker("volume", "rm", "--force", *volumes)
        stray = [name for name in self.api.image_names() if name not in self.images]
        if stray:
            self.docker("rmi", "--force", *stray)

    @property
    def daemon_running(self) -> bool:
        """Whether dockerd runs (it may be stopped or killed by a test, between opens)."""
        return self._daemon is not None and self._daemon.running()

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`close` has not run yet."""
        return self._record is not None and not self._closed

    def logs(self, lines: int = 40) -> str:
        """The tail of dockerd's log (its containerd's lines included)."""
        return tail(self.files.log, lines)

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> Self:
        """Clean a dead run's leftovers, make the namespaces, start the stand-ins and the
        daemon, load the busybox image (and ``preload``)."""
        if self._closed:
            raise EngineError("a closed engine cannot be opened again: make a new one")
        started = time.monotonic()
        records.clean_leftovers()
        self.files.make(self.outside.dns)
        if self._serve_tls and self.tls is None:
            self.tls = make_engine_tls(self.files.work_dir / "tls")
        self._record = records.record(
            self.prefix, self.slot, self.files.work_dir, self.cgroup_parent
        )
        try:
            self.network.create(self.outside)
            self._httpd = outside.stand_in_server(self.outside_netns, self.files.work_dir)
            self._httpd.start()
            self._dns = outside.dns_server(self.outside_netns, self.files.work_dir, self.outside)
            self._dns.start()
            self._await("stand-ins answering", self._stand_ins_up, started)
            self.timings["namespaces"] = round(time.monotonic() - started, 3)
            self.start()
            for image in (busybox_image(self.busybox), *self._preload):
                loaded = self.load_image(image.archive)
                self.images += [name for name in loaded if name not in self.images]
        except BaseException:
            self.close()
            raise
        self.timings["open"] = round(time.monotonic() - started, 3)
        return self

    def start(self) -> None:
        """Start dockerd (after :meth:`stop` or :meth:`kill`); return once ``/_ping`` answers."""
        if self._record is None:
            raise EngineError("open the engine first")
        if self.daemon_running:
            return
        started = time.monotonic()
        self.files.socket.unlink(missing_ok=True)
        extra = self.binaries.flags()
        if self.tls is not None:
            extra += self.tls.dockerd_flags()
        if self.runtimes or self.features:
            extra = [*extra, f"--config-file={self._daemon_config()}"]
        extra = [*extra, *self.daemon_flags]
        argv = daemon.command(
            self.files, self.network, self.cgroup_parent, self.binaries.dockerd, extra=extra,
            storage_driver=self.storage_driver,
        )  # fmt: skip
        self._daemon = Component("dockerd", argv, self.files.log, cwd=self.files.work_dir)
        self._daemon.start()
        self._await("dockerd answering /_ping", lambda: self.api.ping() is not None, started)
        key = "daemon restart" if "daemon start" in self.timings else "daemon start"
        self.timings[key] = round(time.monotonic() - started, 3)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop dockerd as a host's shutdown would: SIGTERM (it stops each container as
        ``docker stop`` does: SIGTERM, then SIGKILL after the container's stop timeout, 10 s
        unless ``--stop-timeout`` said otherwise), then wait for its containerd and shims to
        end; SIGKILL whatever is left after ``timeout``.

        The namespaces, data and images stay: :meth:`start` brings the daemon back.
        """
        started = time.monotonic()
        if self._daemon is not None:
            self._daemon.stop(timeout)
        if not wait_until(self._daemon_gone, timeout=5.0, interval=0.05) and self._record:
            records.kill_processes(self._record, outside_too=False)
        self.timings["daemon stop"] = round(time.monotonic() - started, 3)

    def kill(self) -> None:
        """Crash the daemon: SIGKILL dockerd, its containerd, the shims and every container
        (as if its host lost power). :meth:`start` brings it back on the same data."""
        if self._record is not None:
            records.kill_processes(self._record, outside_too=False)
        if self._daemon is not None:
            self._daemon.kill()

    def freeze(self) -> None:
        """Hang dockerd (SIGSTOP): as a deadlocked daemon or a stalled machine, its socket
        still accepts connections and every connection stays open, but nothing answers. Its
        containerd, shims and containers run on (the apps are up; only the engine is silent).
        :meth:`thaw` ends it."""
        os.kill(self._dockerd_pid(), signal.SIGSTOP)

    def thaw(self) -> None:
        """Undo :meth:`freeze` (SIGCONT; a no-op on a daemon that runs)."""
        os.kill(self._dockerd_pid(), signal.SIGCONT)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """:meth:`freeze` while the block runs, then :meth:`thaw` (also when it fails)."""
        self.freeze()
        try:
            yield
        finally:
            self.thaw()

    @property
    def containerd_store(self) -> bool:
        """Whether images live in containerd's store (``features``), not the graph driver's."""
        return bool(self.features.get(CONTAINERD_SNAPSHOTTER))

    @property
    def storage_driver(self) -> str:
        """``overlay2``, or the containerd snapshotter of the same kernel feature
        (with the containerd store, ``--storage-driver`` names a snapshotter)."""
        return "overlayfs" if self.containerd_store else "overlay2"

    def _dockerd_pid(self) -> int:
        return int(self.files.pidfile.read_text().strip())

    def restart(self) -> None:
        """:meth:`stop`, then :meth:`start`."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Kill the running containers, stop dockerd (SIGTERM), stop the stand-ins, and undo
        every change (see :mod:`.records`); idempotent."""
        if self._closed:
            return
        try:
            if self._record is not None:
                self._kill_containers()
                self.stop()
                for server in (self._httpd, self._dns, *self._relays.values()):
                    if server is not None:
                        server.stop(5.0)
                records.undo(self._record)
                self._record = None
        finally:
            self._closed = True
            _release_slot(self.slot)

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ helpers

    def _kill_containers(self) -> None:
        """SIGKILL the running containers through the API (best effort): a container whose
        PID 1 ignores SIGTERM (a shell, busybox) would hold the daemon's shutdown for its
        stop timeout (10 s by default, whatever ``--shutdown-timeout`` says)."""
        if not self.daemon_running:
            return
        with contextlib.suppress(OSError, ValueError, DockerApiError):
            for container in self.api.checked("GET", "/containers/json").json():
                self.api.request("POST", f"/containers/{container['Id']}/kill")

    def _daemon_config(self) -> Path:
        """A daemon configuration holding :attr:`runtimes` (``--add-runtime`` takes no
        arguments for the runtime) and :attr:`features` (no flag sets them)."""
        config: dict[str, object] = {}
        if self.runtimes:
            config["runtimes"] = {
                name: {"path": str(binary), "runtimeArgs": list(args)}
                for name, (binary, args) in self.runtimes.items()
            }
        if self.features:
            config["features"] = self.features
        path = self.files.work_dir / "daemon.json"
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    def _stand_ins_up(self) -> bool:
        if not (self.files.work_dir / "dns.ready").exists():
            return False
        return all(
            outside.namespace_reaches(self.outside_netns, address, timeout=1.0)
            for address in self.outside.addresses
        )

    def _daemon_gone(self) -> bool:
        return not netns.pids(self.netns)

    def _dead(self) -> str | None:
        for component in (self._httpd, self._dns, self._daemon, *self._relays.values()):
            if component is not None and (code := component.exit_code()) is not None:
                return f"{component.name} exited with code {code}:\n{component.tail(40)}"
        return None

    def _await(self, what: str, check: Callable[[], bool], started: float) -> None:
        remaining = max(0.0, started + self.start_timeout - time.monotonic())
        if not wait_until(check, timeout=remaining, interval=0.1, abort=self._dead):
            raise EngineError(
                f"Docker engine {self.netns}: timed out ({self.start_timeout:g} s): {what}\n"
                f"{self.logs()}"
            )
