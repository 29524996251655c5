"""The harness's container images: built deterministically, cached, and run by a real containerd.

The archive tests need Python only (the busybox and Squid specs need Debian's ``busybox`` and
``squid`` packages). The runtime tests start a private containerd (Debian's package, its CRI
plugin disabled, its state under a temporary directory with a socket of its own), import the
archives with ``ctr`` and run them with runc. Every container gets a network namespace of its own
holding only loopback (the Squid probe joins the gateway's), so nothing can leave the machine.
Without root, containerd, ctr or runc these tests are skipped, unless ``PANDO_REAL_NODES=1``
demands real nodes: then they fail saying what is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from localcluster import images
from localcluster.errors import BinariesNotFoundError
from localcluster.images import Blob, BuiltImage, Dir, ImageSpec
from localcluster.process import Component

from pando_runtime import EgressRule

ENV_REAL_NODES = "PANDO_REAL_NODES"
NAMESPACE = "pando-test"
APPLETS = (
    *("sh", "ls", "cat", "echo", "env", "sleep", "nc", "wget", "nslookup", "httpd", "tar"),
    *("mkdir", "rm", "id", "stat", "head", "tail", "grep", "true", "false", "dd", "seq", "date"),
    *("hostname", "kill", "ps", "printf", "test", "touch", "chmod", "cut", "tr", "sed", "awk"),
    *("find", "wc", "sort", "uniq", "mount", "df", "free", "mv", "rmdir", "timeout"),
)


def need(reason: str) -> None:
    """Skip for ``reason``, or fail when ``PANDO_REAL_NODES=1`` demands real nodes."""
    if os.environ.get(ENV_REAL_NODES) == "1":
        pytest.fail(f"{ENV_REAL_NODES}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def spec_or_need(make: Callable[[], ImageSpec]) -> ImageSpec:
    try:
        return make()
    except FileNotFoundError as exc:
        need(str(exc))
        raise


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: (tar.extractfile(m) or io.BytesIO()).read() for m in tar if m.isfile()}


def layer_members(archive: Path) -> list[tarfile.TarInfo]:
    files = members(archive)
    manifest = json.loads(files["blobs/sha256/" + images.manifest_digest(archive)[7:]])
    layer = files["blobs/sha256/" + manifest["layers"][0]["digest"][7:]]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tar:
        return tar.getmembers()


SMALL: dict[str, images.Content] = {
    "/bin/hello": Blob(b"#!/bin/sh\necho hello\n", 0o755),
    "/etc/motd": b"hi\n",
}


# --- archives -------------------------------------------------------------------------------


def test_archive_is_an_oci_layout_and_a_docker_archive(tmp_path: Path) -> None:
    built = images.build_image(
        "pando.local/small:1", files=SMALL, cmd=("/bin/hello",), directory=tmp_path
    )
    files = members(built.archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():  # every blob is named by its digest
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "pando.local/small:1"
    assert entry["digest"] == built.digest
    (docker,) = json.loads(files["manifest.json"])
    assert docker["RepoTags"] == ["pando.local/small:1"]
    config = json.loads(files[docker["Config"]])
    assert config["config"]["Cmd"] == ["/bin/hello"]
    layer = files[docker["Layers"][0]]
    assert config["rootfs"]["diff_ids"] == [
        "sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest()
    ]


def test_layer_is_sorted_owned_by_root_and_dated_1970(tmp_path: Path) -> None:
    built = images.build_image(
        "pando.local/small:1",
        files=SMALL,
        symlinks={"/bin/hi": "hello"},
        dirs={"/var/spool/x": Dir(0o750, 13, 13)},
        directory=tmp_path,
    )
    entries = layer_members(built.archive)
    names = [m.name for m in entries]
    assert names == [
        "bin",
        "bin/hello",
        "bin/hi",
        "etc",
        "etc/motd",
        "var",
        "var/spool",
        "var/spool/x",
    ]
    assert all(m.mtime == 0 for m in entries)
    owned = {m.name: (m.uid, m.gid, m.mode) for m in entries}
    assert owned["var/spool/x"] == (13, 13, 0o750)
    assert owned["bin/hello"] == (0, 0, 0o755)
    assert all(owned[n][:2] == (0, 0) for n in names if n != "var/spool/x")


def test_same_inputs_make_the_same_bytes_and_a_change_a_new_archive(tmp_path: Path) -> None:
    first = images.build_image("pando.local/small:1", files=SMALL, directory=tmp_path / "a")
    again = images.build_image("pando.local/small:1", files=SMALL, directory=tmp_path / "a")
    elsewhere = images.build_image("pando.local/small:1", files=SMALL, directory=tmp_path / "b")
    assert (again.archive, again.cached, first.cached) == (first.archive, True, False)
    assert first.archive.read_bytes() == elsewhere.archive.read_bytes()
    assert re.fullmatch(r"pando.local_small_1-[0-9a-f]{16}\.tar", first.archive.name)
    changed = images.build_image(
        "pando.local/small:1", files={**SMALL, "/etc/motd": b"bye\n"}, directory=tmp_path / "a"
    )
    assert changed.digest != first.digest
    assert [p.name for p in (tmp_path / "a").iterdir()] == [changed.archive.name]  # old pruned


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(images.ENV_CACHE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert images.cache_dir() == tmp_path / "pando-runtime" / "images"
    monkeypatch.setenv(images.ENV_CACHE, str(tmp_path / "x"))
    assert images.cache_dir() == tmp_path / "x"


@pytest.mark.parametrize("path", ["bin/x", "/../x", "/"])
def test_paths_must_be_absolute_and_inside(path: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="absolute path"):
        images.build_image("pando.local/bad:1", files={path: b""}, directory=tmp_path)


def test_a_path_given_twice_is_refused(tmp_path: Path) -> None:
    spec = ImageSpec("pando.local/bad:1", files={"/x": b""}, symlinks={"/x": "y"})
    with pytest.raises(ValueError, match="given twice"):
        images.build(spec, tmp_path)


def test_busybox_image_holds_the_applets_its_libraries_and_accounts() -> None:
    spec = spec_or_need(images.busybox_spec)
    assert {f"/bin/{a}" for a in APPLETS} <= set(spec.symlinks) | set(spec.files)
    assert isinstance(spec.files["/bin/wget"], Blob)  # the -T wrapper
    assert any(Path(p).name == "libc.so.6" for p in spec.files)
    passwd = spec.files["/etc/passwd"]
    assert isinstance(passwd, bytes)
    assert b"nobody:x:65534" in passwd
    pause = images.pause_spec()
    assert images.layer_tar(pause) == images.layer_tar(spec)  # one layer, stored once


def test_gateway_image_holds_squid_and_runs_as_proxy() -> None:
    spec = spec_or_need(images.gateway_spec)
    assert "/usr/sbin/squid" in spec.files
    assert "/usr/lib/squid/unlinkd" in spec.files
    assert "/usr/share/squid/errors/templates/ERR_ACCESS_DENIED" in spec.files
    assert spec.user == "13:13"
    assert spec.dirs["/var/spool/squid"].uid == 13


def test_coredns_image_runs_the_binary_it_is_given() -> None:
    spec = images.coredns_spec(Path("/somewhere/coredns"))
    assert spec.files["/coredns"] == Path("/somewhere/coredns")
    assert tuple(spec.entrypoint) == ("/coredns",)


# --- a private containerd -------------------------------------------------------------------


def runtime_missing() -> str:
    if os.geteuid() != 0:
        return "running containers needs root"
    for tool in ("containerd", "ctr", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install containerd runc)"
    return ""


CONFIG = """version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = "{d}/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
"""


@dataclasses.dataclass
class Containerd:
    """A containerd of this test module's own, driven through ``ctr``."""

    directory: Path
    process: Component | None = None
    cids: list[str] = dataclasses.field(default_factory=list)

    @property
    def images(self) -> Path:
        """Where the tests' own images go (not the user's cache)."""
        return self.directory / "images"

    @property
    def socket(self) -> str:
        return str(self.directory / "containerd.sock")

    def ctr(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = ["ctr", "-a", self.socket, "-n", NAMESPACE, *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            pytest.fail(
                f"{' '.join(args[:3])} failed ({proc.returncode}): {proc.stderr}{proc.stdout}"
            )
        return proc

    def start(self) -> None:
        (self.directory / "config.toml").write_text(CONFIG.format(d=self.directory))
        argv = ["containerd", "--config", str(self.directory / "config.toml")]
        self.process = Component("containerd", argv, self.directory / "containerd.log")
        self.process.start()
        deadline = time.monotonic() + 60
        while self.ctr("version", check=False, timeout=10).returncode != 0:
            if not self.process.running() or time.monotonic() > deadline:
                pytest.fail(f"containerd did not start:\n{self.process.tail()}", pytrace=False)
            time.sleep(0.2)

    def run(
        self, image: str, *command: str, options: Sequence[str] = (), timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``ctr run --rm`` in the image's own namespaces; the result, whatever the exit code."""
        cid = f"t-{secrets.token_hex(4)}"
        self.cids.append(cid)
        args = ["run", "--rm", *self.private, *options, image, cid, *command]
        return self.ctr(*args, timeout=timeout, check=False)

    @property
    def private(self) -> tuple[str, ...]:
        """``ctr run`` options keeping its FIFOs and runc's state under our directory."""
        return (
            "--fifo-dir",
            str(self.directory / "fifo"),
            "--runc-root",
            str(self.directory / "runc"),
        )

    def start_task(
        self, image: str, cid: str, *command: str, options: Sequence[str] = ()
    ) -> subprocess.Popen[bytes]:
        """A container run in the foreground by a ``ctr`` child, its output to ``<cid>.log``."""
        self.cids.append(cid)
        argv = ["ctr", "-a", self.socket, "-n", NAMESPACE, "run", "--rm"]
        argv += [*self.private, *options, image, cid, *command]
        with (self.directory / f"{cid}.log").open("wb") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        while self.task_pid(cid) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{cid} did not start:\n{self.log(cid)}", pytrace=False)
            time.sleep(0.1)
        return proc

    def task_pid(self, cid: str) -> int | None:
        for line in self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:]:
            fields = line.split()
            if fields[:1] == [cid] and fields[2:3] == ["RUNNING"]:
                return int(fields[1])
        return None

    def log(self, cid: str) -> str:
        return (self.directory / f"{cid}.log").read_text(errors="replace")

    def stop(self) -> None:
        """Remove every task, stop containerd, kill what is left, unmount, remove it all.

        Each step runs even when one before it fails or is interrupted.
        """
        with contextlib.ExitStack() as steps:
            steps.callback(shutil.rmtree, self.directory, ignore_errors=True)
            steps.callback(self._remove_cgroups)
            steps.callback(self._unmount)
            steps.callback(self._kill_leftovers)
            if self.process is not None:
                steps.callback(self.process.stop, timeout=10)
            if self.process is not None and self.process.running():
                self._remove_tasks()

    def _remove_tasks(self) -> None:
        for task in self.ctr("tasks", "ls", "-q", check=False, timeout=30).stdout.split():
            self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False, timeout=30)
            self.ctr("tasks", "rm", "-f", task, check=False, timeout=30)
        for container in self.ctr("containers", "ls", "-q", check=False, timeout=30).stdout.split():
            self.ctr("containers", "rm", container, check=False, timeout=30)

    def _kill_leftovers(self) -> None:
        """SIGKILL our shims (named by our socket) and our containers' processes (by cgroup)."""
        pids: set[int] = set()
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if b"containerd-shim" in argv[0] and self.socket.encode() in argv:
                    pids.add(int(proc.name))
        for cid in self.cids:
            for procs in Path("/sys/fs/cgroup").glob(f"*/{NAMESPACE}/{cid}/cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(pid) for pid in procs.read_text().split())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _unmount(self) -> None:
        prefix = str(self.directory) + "/"
        with Path("/proc/self/mountinfo").open() as f:
            points = [line.split()[4] for line in f if line.split()[4].startswith(prefix)]
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True, timeout=30)

    def _remove_cgroups(self) -> None:
        """Our containers' cgroups, then the namespace's when empty (it may be shared)."""
        time.sleep(0.2)  # killed processes leave their cgroups
        for cgroup in Path("/sys/fs/cgroup").glob(f"*/{NAMESPACE}"):
            for path in [*(cgroup / cid for cid in self.cids), cgroup]:
                with contextlib.suppress(OSError):  # absent, still used, or not ours
                    path.rmdir()


@pytest.fixture(scope="module")
def containerd() -> Iterator[Containerd]:
    if reason := runtime_missing():
        need(reason)
    daemon = Containerd(Path(tempfile.mkdtemp(prefix="pando-ctrd-")))
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def imported(containerd: Containerd) -> dict[str, BuiltImage]:
    """The harness's images (coredns when its build succeeds), imported into ``containerd``."""
    specs = {
        "workload": images.busybox_spec,
        "pause": images.pause_spec,
        "gateway": images.gateway_spec,
    }
    built = {role: images.build(spec_or_need(make)) for role, make in specs.items()}
    try:
        built["coredns"] = images.build(images.coredns_spec(images.find_coredns()))
    except BinariesNotFoundError as exc:
        print(f"coredns not available: {exc}")  # noqa: T201 - its tests say so again
    for image in built.values():
        containerd.ctr("images", "import", str(image.archive), timeout=300)
        size, seconds = image.size / 1e6, image.seconds
        print(f"{image.name}: {size:.1f} MB in {seconds:.2f} s (cached: {image.cached})")  # noqa: T201
    return built


# --- images at work -------------------------------------------------------------------------


def test_busybox_runs_its_applets(containerd: Containerd, imported: dict[str, BuiltImage]) -> None:
    script = (
        'echo hi; for a; do command -v "$a" >/dev/null || echo "missing $a"; done; id -un nobody'
    )
    proc = containerd.run(images.WORKLOAD, "sh", "-c", script, "sh", *APPLETS)
    assert (proc.returncode, proc.stdout) == (0, "hi\nnobody\n"), proc.stderr


def test_wget_fetches_from_httpd_in_the_same_container(
    containerd: Containerd, imported: dict[str, BuiltImage]
) -> None:
    script = (
        "mkdir -p /tmp/w && echo ok > /tmp/w/index.html && (httpd -f -p 8080 -h /tmp/w &);"
        " sleep 0.5;"
        " wget -q -T 5 -O /dev/null http://127.0.0.1:8080/ || exit 10;"  # the canary's probe
        " wget -q -T 5 -O - http://localhost:8080/ || exit 11;"  # /etc/hosts through NSS
        " wget -q -T 2 -O /dev/null http://127.0.0.1:8081/; echo refused=$?"
    )
    proc = containerd.run(images.WORKLOAD, "sh", "-c", script)
    assert (proc.returncode, proc.stdout) == (0, "ok\nrefused=1\n"), proc.stderr


def test_wget_timeout_ends_a_hung_fetch(
    containerd: Containerd, imported: dict[str, BuiltImage]
) -> None:
    # exec: wget as PID 1, as in the canary's probe pod (sh -c 'wget ...')
    script = "nc -l -p 8080 >/dev/null & sleep 0.3; exec wget -q -T 2 -O /dev/null http://127.0.0.1:8080/"
    started = time.monotonic()
    proc = containerd.run(images.WORKLOAD, "sh", "-c", script)
    assert proc.returncode not in (0, 139), proc.stderr  # refused by timeout, not a crash
    assert time.monotonic() - started < 15


def test_tar_round_trip_through_a_volume(
    containerd: Containerd, imported: dict[str, BuiltImage]
) -> None:
    volume = containerd.directory / f"volume-{secrets.token_hex(3)}"
    volume.mkdir()
    with tarfile.open(volume / "in.tar", "w") as tar:
        for name, data in (("a/b.txt", b"bee\n"), (".hidden", b"h\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    script = "mkdir /d && tar -xf /v/in.tar -C /d && cd /d && exec tar -cf /v/out.tar ."
    mount = f"type=bind,src={volume},dst=/v,options=rbind:rw"
    proc = containerd.run(images.WORKLOAD, "sh", "-c", script, options=("--mount", mount))
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(volume / "out.tar") as tar:
        got = {m.name: (tar.extractfile(m) or io.BytesIO()).read() for m in tar if m.isfile()}
    assert got == {"./a/b.txt": b"bee\n", "./.hidden": b"h\n"}


def test_a_custom_image_exits_with_its_code(
    containerd: Containerd, imported: dict[str, BuiltImage]
) -> None:
    base = images.busybox_spec()
    built = images.build_image(
        "pando.local/exit3:1", base=base, cmd=("sh", "-c", "exit 3"), directory=containerd.images
    )
    containerd.ctr("images", "import", str(built.archive))
    assert containerd.run(built.name).returncode == 3


def test_pause_ends_promptly_on_sigterm(
    containerd: Containerd, imported: dict[str, BuiltImage]
) -> None:
    cid = f"pause-{secrets.token_hex(3)}"
    proc = containerd.start_task(images.PAUSE, cid)
    try:
        time.sleep(1)
        assert proc.poll() is None, containerd.log(cid)  # it stays up
        started = time.monotonic()
        containerd.ctr("tasks", "kill", "-s", "SIGTERM", cid)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 2
    finally:
        if proc.poll() is None:
            containerd.ctr("tasks", "kill", "-s", "SIGKILL", cid, check=False)
            proc.wait(timeout=30)


def test_squid_starts_with_the_adapter_config_and_refuses_unlisted_hosts(
    containerd: Containerd, imported: dict[str, BuiltImage]
) -> None:
    from pando_runtime_kubernetes.manifests._gateway import gateway_pod, squid_config  # noqa: PLC0415

    pod = gateway_pod("ns", "0" * 64, image=images.GATEWAY, labels={}, placement={}, replaces=None)
    (container,) = pod["spec"]["containers"]
    config_dir = containerd.directory / f"gateway-{secrets.token_hex(3)}"
    config_dir.mkdir()
    rules = [EgressRule(destination="allowed.example", ports=[443])]
    (config_dir / "squid.conf").write_text(squid_config(rules, ["10.0.0.0/8"]))
    target = container["volumeMounts"][0]["mountPath"]
    mount = f"type=bind,src={config_dir},dst={target},options=rbind:ro"
    cid = f"squid-{secrets.token_hex(3)}"
    proc = containerd.start_task(
        images.GATEWAY, cid, *container["command"], options=("--mount", mount)
    )
    try:
        deadline = time.monotonic() + 60
        while "Accepting HTTP Socket connections" not in containerd.log(cid):
            assert proc.poll() is None, containerd.log(cid)
            assert time.monotonic() < deadline, containerd.log(cid)
            time.sleep(0.2)
        pid = containerd.task_pid(cid)
        urls = "http://denied.example/ http://10.1.2.3/"
        probe = f"for u in {urls}; do wget -q -T 5 -O /dev/null $u 2>&1; done"
        answer = containerd.run(
            images.WORKLOAD,
            "sh",
            "-c",
            probe,
            options=(
                "--with-ns",
                f"network:/proc/{pid}/ns/net",
                "--env",
                "http_proxy=http://127.0.0.1:3128",
            ),
        )
        assert answer.stdout.count("403 Forbidden") == 2, answer.stdout + answer.stderr
        containerd.ctr("tasks", "kill", "-s", "SIGTERM", cid)
        assert proc.wait(timeout=30) == 0, containerd.log(cid)
        assert containerd.log(cid).count("TCP_DENIED/403") == 2
    finally:
        if proc.poll() is None:
            containerd.ctr("tasks", "kill", "-s", "SIGKILL", cid, check=False)
            proc.wait(timeout=30)


def coredns_or_need(imported: dict[str, BuiltImage]) -> BuiltImage:
    if "coredns" not in imported:
        need("coredns could not be built (tools/coredns/build.sh)")
    return imported["coredns"]


def test_coredns_prints_its_version(
    containerd: Containerd, imported: dict[str, BuiltImage]
) -> None:
    image = coredns_or_need(imported)
    proc = containerd.run(image.name, "/coredns", "-version")  # ctr's arguments replace all
    assert proc.returncode == 0, proc.stderr
    assert "CoreDNS-" in proc.stdout


def test_nslookup_asks_a_coredns_on_loopback(
    containerd: Containerd, imported: dict[str, BuiltImage]
) -> None:
    coredns_or_need(imported)
    corefile = b".:53 {\n  bind 127.0.0.1\n  hosts {\n    198.18.0.7 pando.test\n  }\n}\n"
    built = images.build_image(
        "pando.local/dns-probe:1",
        base=images.busybox_spec(),
        files={"/coredns": images.find_coredns(), "/etc/coredns/Corefile": corefile},
        directory=containerd.images,
    )
    containerd.ctr("images", "import", str(built.archive))
    script = (
        "/coredns -conf /etc/coredns/Corefile >/dev/null & for i in $(seq 50); do"
        " nslookup pando.test 127.0.0.1 | grep -q 198.18.0.7 && exit 0; sleep 0.2; done; exit 1"
    )
    assert containerd.run(built.name, "sh", "-c", script).returncode == 0
