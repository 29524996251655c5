"""Container images for the real test nodes, built from files on this machine (no registry).

Each image is one gzip'd layer in an OCI image layout, written as a tar that ``ctr images
import`` reads (``index.json`` names the image with ``io.containerd.image.name``) and that
docker-archive readers read too (``manifest.json``). The layer's entries are sorted, owned by
root (unless a directory names its owner) and dated 1970, so an archive's digest depends on
its contents only. Archives are cached as ``<name>-<key>.tar`` under :func:`cache_dir`, where
``<key>`` hashes the layer and the image configuration: a changed input makes a new archive
(the older one of that name is removed), an unchanged one is found again without compressing.

The harness's images: :func:`busybox_spec` (apps and the adapter's ``helper_image``),
:func:`pause_spec` (containerd's ``sandbox_image``), :func:`gateway_spec` (Squid, the egress
gateway) and :func:`coredns_spec` (the cluster DNS). :func:`build` turns a spec into an
archive, :func:`build_image` makes a small custom image for a test, :func:`harness_images`
builds the lot.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

from .binaries import go_tool

WORKLOAD = "pando.local/busybox:1"
PAUSE = "pando.local/pause:1"
GATEWAY = "pando.local/squid:1"
COREDNS = "pando.local/coredns:1"
ENV_CACHE = "PANDO_IMAGE_CACHE"
"""Environment variable naming the directory archives are cached in."""
ENV_COREDNS_BIN = "PANDO_COREDNS_BIN"
"""Environment variable naming a directory that already holds ``coredns``."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FORMAT = "pando-image-1"
"""Part of every cache key: change it when the archive's layout changes."""
PROXY_ID = 13
"""Debian's ``proxy`` user and group, Squid's own."""

_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_INDEX = "application/vnd.oci.image.index.v1+json"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_EPOCH = "1970-01-01T00:00:00Z"

NSSWITCH = b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
HOSTS = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
WGET = b"""#!/bin/sh
# Debian's busybox 1.35 is built without wget's timeout: its -T crashes the applet.
# Take -T SECS (or --timeout=SECS) off and run wget under the timeout applet instead.
t=""
n=$#
while [ "$n" -gt 0 ]; do
  a=$1; shift; n=$((n - 1))
  case $a in
    -T) t=$1; shift; n=$((n - 1)) ;;
    -T*) t=${a#-T} ;;
    --timeout=*) t=${a#--timeout=} ;;
    *) set -- "$@" "$a" ;;
  esac
done
[ -z "$t" ] && exec /bin/busybox wget "$@"
# Not exec: as PID 1 (sh -c 'wget ...' in a pod) wget would ignore the timeout's SIGTERM.
/bin/busybox timeout "$t" /bin/busybox wget "$@"
"""
PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
"""PID 1 has no default signal actions: the trap makes SIGTERM and SIGINT end it at once."""


class Dir(NamedTuple):
    """A directory of an image: its mode and owner."""

    mode: int = 0o755
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Blob:
    """A file's contents given inline, with its mode."""

    data: bytes
    mode: int = 0o644


Content: TypeAlias = Path | bytes | Blob
"""A file of an image: a host file (its permission bits kept), bytes (0644), or a Blob."""


@dataclass(frozen=True)
class ImageSpec:
    """What an image holds (files, symlinks, directories by absolute path) and its config.

    Vary one with :func:`dataclasses.replace` or :func:`build_image`'s ``base``.
    """

    name: str
    files: Mapping[str, Content] = field(default_factory=dict)
    symlinks: Mapping[str, str] = field(default_factory=dict)
    dirs: Mapping[str, Dir] = field(default_factory=dict)
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=lambda: {"PATH": PATH})
    user: str = ""
    workdir: str = ""


@dataclass(frozen=True)
class BuiltImage:
    """An image archive: reference, path, manifest digest, size, build seconds, cache hit."""

    name: str
    archive: Path
    digest: str
    size: int
    seconds: float
    cached: bool


def cache_dir() -> Path:
    """``$PANDO_IMAGE_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/pando-runtime/images``."""
    if named := os.environ.get(ENV_CACHE):
        return Path(named).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "pando-runtime" / "images"


def _member(name: str, kind: bytes, mode: int, uid: int = 0, gid: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, gid, 0
    return info


def _relative(path: str) -> str:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not path.startswith("/") or ".." in parts or not parts:
        raise ValueError(f"not an absolute path inside an image: {path!r}")
    return "/".join(parts)


def _read(content: Content) -> tuple[bytes, int]:
    if isinstance(content, Path):
        return content.read_bytes(), content.stat().st_mode & 0o777
    if isinstance(content, Blob):
        return content.data, content.mode
    return content, 0o644


def _entries(spec: ImageSpec) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    """Every layer entry by relative path, parents included (0755 unless named)."""
    out: dict[str, tuple[tarfile.TarInfo, bytes]] = {}

    def add(info: tarfile.TarInfo, data: bytes = b"") -> None:
        if info.name in out:
            raise ValueError(f"/{info.name} is given twice in {spec.name}")
        out[info.name] = (info, data)

    for path, d in spec.dirs.items():
        add(_member(_relative(path), tarfile.DIRTYPE, d.mode, d.uid, d.gid))
    for path, target in spec.symlinks.items():
        link = _member(_relative(path), tarfile.SYMTYPE, 0o777)
        link.linkname = target
        add(link)
    for path, content in spec.files.items():
        data, mode = _read(content)
        info = _member(_relative(path), tarfile.REGTYPE, mode)
        info.size = len(data)
        add(info, data)
    for name in list(out):
        parts = name.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            out.setdefault(parent, (_member(parent, tarfile.DIRTYPE, 0o755), b""))
    return out


def layer_tar(spec: ImageSpec) -> bytes:
    """The image's one layer, uncompressed: entries in path order, parents first."""
    buffer = io.BytesIO()
    entries = _entries(spec)
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries, key=lambda n: n.split("/")):
            info, data = entries[name]
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def _json(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": _digest(data), "size": len(data)}


def _config(spec: ImageSpec, diff_id: str) -> bytes:
    config: dict[str, Any] = {"Env": [f"{k}={v}" for k, v in sorted(spec.env.items())]}
    config |= {k: list(v) for k, v in (("Entrypoint", spec.entrypoint), ("Cmd", spec.cmd)) if v}
    config |= {k: v for k, v in (("User", spec.user), ("WorkingDir", spec.workdir)) if v}
    machine = platform.machine()
    return _json(
        {
            "architecture": _ARCH.get(machine, machine),
            "os": "linux",
            "created": _EPOCH,
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": _EPOCH, "created_by": "pando localcluster images"}],
        }
    )


def _archive_members(name: str, layer: bytes, config: bytes) -> Iterator[tuple[str, bytes]]:
    """The archive's files: blobs, ``oci-layout``, ``index.json``, ``manifest.json``."""
    compressed = gzip.compress(layer, compresslevel=6, mtime=0)
    layers = [_descriptor(_LAYER, compressed)]
    manifest = _json(
        {"schemaVersion": 2, "mediaType": _MANIFEST, "config": _descriptor(_CONFIG, config)}
        | {"layers": layers}
    )
    entry = _descriptor(_MANIFEST, manifest)
    entry["annotations"] = {"io.containerd.image.name": name}
    entry["platform"] = {"architecture": json.loads(config)["architecture"], "os": "linux"}
    blobs = {_digest(b)[7:]: b for b in (compressed, config, manifest)}
    for hex_digest in sorted(blobs):
        yield f"blobs/sha256/{hex_digest}", blobs[hex_digest]
    yield "oci-layout", _json({"imageLayoutVersion": "1.0.0"})
    yield "index.json", _json({"schemaVersion": 2, "mediaType": _INDEX, "manifests": [entry]})
    docker = {"Config": f"blobs/sha256/{_digest(config)[7:]}", "RepoTags": [name]}
    yield "manifest.json", _json([docker | {"Layers": [f"blobs/sha256/{_digest(compressed)[7:]}"]}])


def _write_archive(path: Path, members: Iterator[tuple[str, bytes]]) -> None:
    """Write the archive beside ``path``, then rename it: readers never see half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w") as tar:
            for directory in ("blobs", "blobs/sha256"):
                tar.addfile(_member(directory, tarfile.DIRTYPE, 0o755))
            for name, data in members:
                info = _member(name, tarfile.REGTYPE, 0o644)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def manifest_digest(archive: Path) -> str:
    """The digest of the manifest an archive's ``index.json`` names."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive} holds no index.json")
        return str(json.load(member)["manifests"][0]["digest"])


def archive_stem(name: str) -> str:
    """The file-name stem of an image's archives: its reference, ``/`` and ``:`` as ``_``."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", name)


def build(
    spec: ImageSpec, directory: Path | None = None, *, diff_id: str | None = None
) -> BuiltImage:
    """The archive of ``spec``: found in the cache, else written there (older ones removed).

    ``diff_id``: the layer digest the config names, when not the layer's own (a broken
    archive, which an engine refuses or cannot unpack).
    """
    started = time.monotonic()
    directory = directory or cache_dir()
    layer = layer_tar(spec)
    config = _config(spec, diff_id or _digest(layer))
    key = hashlib.sha256(f"{FORMAT}\n{spec.name}\n".encode() + config).hexdigest()[:16]
    stem = archive_stem(spec.name)
    archive = directory / f"{stem}-{key}.tar"
    cached = archive.is_file()
    if not cached:
        directory.mkdir(parents=True, exist_ok=True)
        _write_archive(archive, _archive_members(spec.name, layer, config))
        for old in directory.glob(f"{stem}-*.tar"):
            if old != archive and re.fullmatch(rf"{re.escape(stem)}-[0-9a-f]{{16}}", old.stem):
                old.unlink(missing_ok=True)
    size = archive.stat().st_size
    digest = manifest_digest(archive)
    return BuiltImage(spec.name, archive, digest, size, time.monotonic() - started, cached)


def build_image(
    name: str,
    *,
    files: Mapping[str, Content] | None = None,
    symlinks: Mapping[str, str] | None = None,
    dirs: Mapping[str, Dir] | None = None,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    user: str = "",
    workdir: str = "",
    base: ImageSpec | None = None,
    directory: Path | None = None,
) -> BuiltImage:
    """Build a custom image: ``base``'s contents (say :func:`busybox_spec`'s) and these.

    An entry given here replaces whatever ``base`` has at its path; ``env`` is merged into
    ``base``'s; ``entrypoint``, ``cmd``, ``user`` and ``workdir`` replace its own when given.
    """
    base = base or ImageSpec(name)
    added = {**(files or {}), **(symlinks or {}), **(dirs or {})}

    def keep(entries: Mapping[str, Any]) -> dict[str, Any]:
        return {path: value for path, value in entries.items() if path not in added}

    spec = dataclasses.replace(
        base,
        name=name,
        files=keep(base.files) | dict(files or {}),
        symlinks=keep(base.symlinks) | dict(symlinks or {}),
        dirs=keep(base.dirs) | dict(dirs or {}),
        entrypoint=entrypoint or base.entrypoint,
        cmd=cmd or base.cmd,
        env={**base.env, **(env or {})},
        user=user or base.user,
        workdir=workdir or base.workdir,
    )
    return build(spec, directory)


def library_closure(*binaries: Path) -> dict[str, Path]:
    """The shared libraries ``ldd`` lists for ``binaries`` (none for a static binary).

    Keys are the paths the dynamic loader finds them at; values the files' real paths.
    """
    found: dict[str, Path] = {}
    for binary in binaries:
        proc = subprocess.run(
            ["ldd", str(binary)], capture_output=True, text=True, check=False, timeout=60
        )
        if proc.returncode != 0:
            if "not a dynamic executable" in proc.stdout + proc.stderr:
                continue
            raise RuntimeError(f"ldd {binary} failed: {proc.stderr.strip()}")
        for match in re.finditer(r"(?:=>\s*)?(/\S+)\s+\(0x", proc.stdout):
            found[match.group(1)] = Path(match.group(1)).resolve()
    return found


def _nss_modules(libraries: Mapping[str, Path]) -> dict[str, Content]:
    """glibc's ``files`` and ``dns`` NSS modules, beside the libc a closure holds."""
    libc = next((Path(p) for p in libraries if Path(p).name == "libc.so.6"), None)
    if libc is None:
        return {}
    modules = (libc.parent / f"libnss_{m}.so.2" for m in ("files", "dns"))
    return {str(m): m.resolve() for m in modules if m.exists()}


def _system_files(users: Sequence[tuple[str, int, str]] = ()) -> dict[str, Content]:
    """``/etc/passwd`` and ``/etc/group`` (root, ``users`` as (name, id, home), nobody),
    ``/etc/nsswitch.conf`` and a default ``/etc/hosts`` (the runtime mounts its own)."""
    everyone = [("root", 0, "/root"), *users, ("nobody", 65534, "/nonexistent")]
    passwd = "".join(f"{n}:x:{i}:{i}:{n}:{h}:/bin/sh\n" for n, i, h in everyone)
    group = "".join(f"{n.replace('nobody', 'nogroup')}:x:{i}:\n" for n, i, _ in everyone)
    return {
        "/etc/passwd": passwd.encode(),
        "/etc/group": group.encode(),
        "/etc/nsswitch.conf": NSSWITCH,
        "/etc/hosts": HOSTS,
    }


def _base_dirs() -> dict[str, Dir]:
    """``/tmp`` (sticky, everyone's), ``/root`` and the runtime's mount points."""
    tmp = "/tmp"  # noqa: S108 - a directory inside the image
    return {tmp: Dir(0o1777), "/root": Dir(0o700)} | {d: Dir() for d in ("/proc", "/sys", "/dev")}


def find_busybox() -> Path:
    """Debian's busybox (the ``busybox`` package), its real path."""
    found = shutil.which("busybox") or "/bin/busybox"
    if not os.access(found, os.X_OK):
        raise FileNotFoundError("busybox not found: apt-get install busybox")
    return Path(found).resolve()


def busybox_spec(name: str = WORKLOAD, busybox: Path | None = None) -> ImageSpec:
    """Dynamic busybox with every applet in ``/bin``, its libraries, accounts and NSS.

    ``/bin/wget`` is a script that runs the applet under ``timeout`` when given ``-T``. The
    static build (``busybox-static``) is refused: its sh runs applets before ``PATH``, so
    ``sh -c 'wget -T 5 ...'`` would reach the crashing applet, not the script.
    """
    busybox = busybox or find_busybox()
    libraries = library_closure(busybox)
    if not libraries:
        raise FileNotFoundError(f"{busybox} is static: apt-get install busybox (the dynamic one)")
    listed = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    files: dict[str, Content] = {"/bin/busybox": busybox, "/bin/wget": Blob(WGET, 0o755)}
    files |= libraries | _nss_modules(libraries) | _system_files()
    links = {f"/bin/{a}": "busybox" for a in listed if f"/bin/{a}" not in files}
    links["/usr/bin/env"] = "/bin/busybox"
    return ImageSpec(name, files, links, _base_dirs(), cmd=("sh",))


def pause_spec(name: str = PAUSE, busybox: Path | None = None) -> ImageSpec:
    """The pod sandbox: :func:`busybox_spec`'s layer (stored once) running a sleeping sh."""
    spec = busybox_spec(name, busybox)
    return dataclasses.replace(spec, entrypoint=("/bin/sh", "-c", PAUSE_SCRIPT), cmd=())


def _tree(host: Path, image: str) -> dict[str, Content]:
    """Every file under ``host`` (symlinks followed), at the same place under ``image``."""
    found = sorted(p for p in host.rglob("*") if p.is_file())
    return {f"{image}/{p.relative_to(host).as_posix()}": p.resolve() for p in found}


def gateway_spec(name: str = GATEWAY, squid: Path = Path("/usr/sbin/squid")) -> ImageSpec:
    """Debian's Squid as the adapter runs it (``squid -N -f CONFIG``), as ``proxy`` (13).

    Not root: Squid started as root switches to ``proxy`` and then may not reopen the
    runtime's stdout pipe, which the adapter's ``access_log stdio:/dev/stdout`` needs.
    Its helper ``unlinkd`` is in (checked at start); ``pinger`` (ICMP, for peer selection)
    is not: Squid logs that once and runs on.
    """
    if not os.access(squid, os.X_OK):
        raise FileNotFoundError(
            f"{squid} not found: apt-get install squid (tools/debian/install.sh)"
        )
    share = Path("/usr/share/squid")
    programs = {
        "/usr/sbin/squid": squid.resolve(),
        "/usr/lib/squid/unlinkd": Path("/usr/lib/squid/unlinkd"),
    }
    libraries = library_closure(*programs.values())
    files: dict[str, Content] = {**programs, **libraries, **_nss_modules(libraries)}
    files |= _system_files([("proxy", PROXY_ID, "/bin")])
    files |= {
        "/usr/share/squid/mime.conf": share / "mime.conf",
        "/etc/squid/errorpage.css": Path("/etc/squid/errorpage.css"),
    }
    for sub in ("icons", "errors/templates", "errors/en"):
        files |= _tree(share / sub, f"/usr/share/squid/{sub}")
    proxy = Dir(0o750, PROXY_ID, PROXY_ID)
    dirs = (
        _base_dirs()
        | {"/run": Dir()}
        | dict.fromkeys(("/run/squid", "/var/log/squid", "/var/spool/squid"), proxy)
    )
    command = ("squid", "-N", "-f", "/etc/pando-gateway/squid.conf")
    user = f"{PROXY_ID}:{PROXY_ID}"
    return ImageSpec(name, files, {"/var/run": "/run"}, dirs, cmd=command, user=user)


def find_coredns(*, timeout: float = 1800) -> Path:
    """``coredns``: from ``$PANDO_COREDNS_BIN``, else built by ``tools/coredns/build.sh``."""
    return go_tool("coredns", "coredns", ENV_COREDNS_BIN, timeout=timeout)


def coredns_spec(coredns: Path, name: str = COREDNS) -> ImageSpec:
    """CoreDNS's static binary as ``/coredns`` (the entrypoint), accounts and ``/tmp``."""
    files: dict[str, Content] = {"/coredns": coredns, **_system_files()}
    return ImageSpec(name, files, dirs=_base_dirs(), entrypoint=("/coredns",))


def harness_images(
    coredns: Path | None = None, directory: Path | None = None
) -> dict[str, BuiltImage]:
    """Build (or find) the harness's images, by role: workload, pause, gateway, coredns.

    ``coredns`` is the binary (see :func:`find_coredns`); without one that image is left out.
    """
    specs = {"workload": busybox_spec(), "pause": pause_spec(), "gateway": gateway_spec()}
    if coredns is not None:
        specs["coredns"] = coredns_spec(coredns)
    return {role: build(spec, directory) for role, spec in specs.items()}
