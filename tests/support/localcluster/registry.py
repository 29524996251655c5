"""The tests' image registry: CNCF Distribution on loopback, with TLS and a password.

:class:`LocalRegistry` runs ``registry serve`` (``github.com/distribution/distribution/v3``,
built by ``tools/registry/build.sh`` into a cache outside the repository, or taken from the
directory ``PANDO_REGISTRY_BIN`` names) on ``127.0.0.1:<free port>``:

- TLS with a serving certificate for ``IP:127.0.0.1`` and ``DNS:localhost``: the local
  cluster's (:attr:`Pki.registry <localcluster.pki.Pki>`, signed by its CA, see
  :meth:`LocalRegistry.for_pki`), one signed by a CA given as a certificate and key pair, or
  one of a CA made for the registry alone;
- htpasswd authentication (bcrypt, the only hash Distribution takes; the PyPI ``bcrypt``
  package of the test dependency group, at its lowest cost, since the registry checks the
  password on every request) for a generated user and password, the password also in a file
  (``0600``) for settings that name one;
- filesystem storage, its configuration and its log in a work directory.

``start`` waits until ``/v2/`` answers 401 over TLS; the process is stopped on every way out
(``stop``, the ``with`` block, this process's exit, and the kernel's parent-death signal).

:class:`RegistryClient` is a small client of the distribution API (standard library only) for
the harness to seed images and look at manifests: :meth:`RegistryClient.push` takes an OCI
image layout or a ``docker save`` archive, uploads the blobs the registry lacks (``POST`` then
``PUT``), puts the manifest under a tag and returns both references.
"""

from __future__ import annotations

import atexit
import base64
import gzip
import hashlib
import http
import http.client
import io
import json
import os
import posixpath
import re
import secrets
import ssl
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self
from urllib.parse import quote, urlsplit

from .binaries import go_tool
from .errors import ClusterError, ClusterStartError
from .net import free_ports, retry_on_taken_port, wait_until
from .pki import REGISTRY_SANS, CertKey, Pki, issue_server_cert, make_ca
from .process import Component, tail

__all__ = [
    "ENV_REGISTRY_BIN",
    "LocalRegistry",
    "PushedImage",
    "RegistryClient",
    "RegistryError",
    "find_registry",
]

ENV_REGISTRY_BIN = "PANDO_REGISTRY_BIN"
"""Environment variable naming a directory that already holds ``registry``."""
REALM = "pando-local-registry"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
"""What the client accepts when it asks for a manifest."""
_INDEXES = (OCI_INDEX, DOCKER_LIST)
_NAME = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
_TAG = re.compile(r"[\w][\w.-]{0,127}")


def find_registry() -> Path:
    """The ``registry`` binary, built first by ``tools/registry/build.sh`` if needed.

    The first build compiles Distribution and its dependencies: minutes on a small machine.
    """
    return go_tool("registry", "registry", ENV_REGISTRY_BIN, timeout=1800)


class RegistryError(ClusterError):
    """The registry refused a request of :class:`RegistryClient` (``status``: 0 if no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class PushedImage:
    """An image the client pushed: its digest and both references."""

    name: str
    tag: str
    digest: str
    media_type: str
    by_digest: str
    """``host:port/name@sha256:...``: immutable."""
    by_tag: str
    """``host:port/name:tag``."""


@dataclass(frozen=True)
class _Manifest:
    digest: str
    media_type: str
    data: bytes


@dataclass(frozen=True)
class _Blob:
    digest: str
    size: int
    member: str
    """The archive member that holds it."""


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer_type(head: bytes) -> str:
    """The OCI media type of a layer from its first bytes: gzip, zstd, else a plain tar."""
    if head.startswith(b"\x1f\x8b"):
        return "application/vnd.oci.image.layer.v1.tar+gzip"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "application/vnd.oci.image.layer.v1.tar+zstd"
    return "application/vnd.oci.image.layer.v1.tar"


class _Archive:
    """The members of an image archive (a tar, gzip'd or not), links followed."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.members = {posixpath.normpath(m.name.lstrip("/")): m for m in tar.getmembers()}

    def member(self, name: str) -> tarfile.TarInfo:
        name = posixpath.normpath(name.lstrip("/"))
        for _ in range(16):
            info = self.members.get(name)
            if info is None:
                raise RegistryError(f"the archive has no {name}")
            if info.issym():
                name = posixpath.normpath(posixpath.join(posixpath.dirname(name), info.linkname))
            elif info.islnk():
                name = posixpath.normpath(info.linkname.lstrip("/"))
            elif info.isfile():
                return info
            else:
                raise RegistryError(f"{name} in the archive is not a file")
        raise RegistryError(f"{name} in the archive: too many links")

    def has(self, name: str) -> bool:
        return posixpath.normpath(name.lstrip("/")) in self.members

    def open(self, name: str) -> IO[bytes]:
        found = self.tar.extractfile(self.member(name))
        if found is None:  # pragma: no cover - member() returns files only
            raise RegistryError(f"cannot read {name} in the archive")
        return found

    def read(self, name: str) -> bytes:
        with self.open(name) as f:
            return f.read()

    def digest(self, name: str) -> tuple[str, int, bytes]:
        """sha256 digest, size and first bytes of a member."""
        h = hashlib.sha256()
        size = 0
        head = b""
        with self.open(name) as f:
            while chunk := f.read(1 << 20):
                if not head:
                    head = chunk[:8]
                h.update(chunk)
                size += len(chunk)
        return "sha256:" + h.hexdigest(), size, head


def _blob_path(digest: str) -> str:
    algorithm, _, hexa = digest.partition(":")
    return f"blobs/{algorithm}/{hexa}"


def _oci_layout(
    archive: _Archive,
) -> tuple[list[_Blob], list[_Manifest]]:
    """Blobs and manifests (children first) of the one image an OCI layout's index names."""
    index = json.loads(archive.read("index.json"))
    digests = list(dict.fromkeys(d["digest"] for d in index.get("manifests", ())))
    if len(digests) != 1:
        raise RegistryError(f"index.json names {len(digests)} images; push one at a time")
    blobs: dict[str, _Blob] = {}
    manifests: list[_Manifest] = []

    def visit(descriptor: Mapping[str, Any]) -> None:
        digest = str(descriptor["digest"])
        data = archive.read(_blob_path(digest))
        if _sha256(data) != digest:
            raise RegistryError(f"blob {digest} does not match its digest")
        body = json.loads(data)
        media_type = str(descriptor.get("mediaType") or body.get("mediaType") or OCI_MANIFEST)
        if media_type in _INDEXES:
            for child in body.get("manifests", ()):
                if archive.has(_blob_path(child["digest"])):
                    visit(child)
        else:
            for ref in [body["config"], *body.get("layers", ())]:
                d = str(ref["digest"])
                blobs[d] = _Blob(d, int(ref["size"]), _blob_path(d))
        manifests.append(_Manifest(digest, media_type, data))

    first = next(d for d in index["manifests"] if d["digest"] == digests[0])
    visit(first)
    return list(blobs.values()), manifests


def _docker_archive(archive: _Archive) -> tuple[list[_Blob], list[_Manifest]]:
    """Blobs and an OCI manifest (layers kept as they are) of a ``docker save`` archive."""
    entries = json.loads(archive.read("manifest.json"))
    if len(entries) != 1:
        raise RegistryError(f"manifest.json lists {len(entries)} images; push one at a time")
    entry = entries[0]
    config = archive.read(entry["Config"])
    config_digest = _sha256(config)
    blobs = {config_digest: _Blob(config_digest, len(config), entry["Config"])}
    layers = []
    for path in entry["Layers"]:
        digest, size, head = archive.digest(path)
        blobs[digest] = _Blob(digest, size, path)
        layers.append({"mediaType": _layer_type(head), "digest": digest, "size": size})
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
        "layers": layers,
    }
    data = json.dumps(manifest, separators=(",", ":")).encode()
    return list(blobs.values()), [_Manifest(_sha256(data), OCI_MANIFEST, data)]


class RegistryClient:
    """A client of one registry's distribution API: HTTPS (verified), Basic auth or none.

    Each request is a connection of its own: simple, and fast enough for seeding images.
    """

    def __init__(
        self,
        address: str,
        context: ssl.SSLContext,
        *,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.address = address
        self._context = context
        self._auth = (
            "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
            if username is not None and password is not None
            else None
        )
        self.timeout = timeout
        self.requests = 0
        """Requests sent so far."""

    def __repr__(self) -> str:
        return f"RegistryClient({self.address!r}, auth={self._auth is not None})"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | IO[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request; its status, headers (lower-case names) and body. No status is raised."""
        host, _, port = self.address.rpartition(":")
        conn = http.client.HTTPSConnection(
            host, int(port), context=self._context, timeout=self.timeout
        )
        sent = dict(headers or {})
        if self._auth is not None:
            sent["Authorization"] = self._auth
        self.requests += 1
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            data = response.read()
            answer = {k.lower(): v for k, v in response.getheaders()}
        except (OSError, http.client.HTTPException) as error:
            raise RegistryError(f"{method} {path}: {type(error).__name__}: {error}") from error
        finally:
            conn.close()
        return response.status, answer, data

    def _expect(self, status: int, wanted: int, what: str, data: bytes) -> None:
        if status != wanted:
            raise RegistryError(f"{what}: HTTP {status}: {data[:300]!r}", status)

    def ping(self) -> int:
        """The status of ``GET /v2/`` (200 with good credentials, 401 without)."""
        return self.request("GET", "/v2/")[0]

    def manifest_status(self, name: str, reference: str) -> int:
        """The status of a manifest ``HEAD`` (200 present, 404 absent, 401 refused)."""
        accept = ", ".join(MANIFEST_TYPES)
        return self.request(
            "HEAD", f"/v2/{name}/manifests/{reference}", headers={"Accept": accept}
        )[0]

    def manifest(self, name: str, reference: str) -> tuple[str, bytes]:
        """A manifest's media type and bytes."""
        status, headers, data = self.request(
            "GET",
            f"/v2/{name}/manifests/{reference}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        self._expect(status, 200, f"GET manifest {name}:{reference}", data)
        return headers.get("content-type", ""), data

    def has_blob(self, name: str, digest: str) -> bool:
        """Whether the repository holds the blob (``HEAD``)."""
        status, _, data = self.request("HEAD", f"/v2/{name}/blobs/{digest}")
        if status not in {200, 404}:
            self._expect(status, 200, f"HEAD blob {digest}", data)
        return status == http.HTTPStatus.OK

    def upload_blob(self, name: str, digest: str, size: int, body: bytes | IO[bytes]) -> None:
        """Upload a blob in one ``PUT`` after the ``POST`` that opens the upload."""
        status, headers, data = self.request("POST", f"/v2/{name}/blobs/uploads/")
        self._expect(status, 202, f"start the upload of {digest}", data)
        location = urlsplit(headers["location"])
        target = (
            location.path
            + "?"
            + "&".join(q for q in (location.query, f"digest={quote(digest)}") if q)
        )
        status, _, data = self.request(
            "PUT",
            target,
            body=body,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )
        self._expect(status, 201, f"upload {digest}", data)

    def put_manifest(self, name: str, reference: str, media_type: str, data: bytes) -> str:
        """Put a manifest under a tag or its digest; the digest the registry gives it."""
        status, headers, answer = self.request(
            "PUT",
            f"/v2/{name}/manifests/{reference}",
            body=data,
            headers={"Content-Type": media_type},
        )
        self._expect(status, 201, f"PUT manifest {name}:{reference}", answer)
        return headers.get("docker-content-digest", _sha256(data))

    def push(self, archive: Path | bytes, name: str, tag: str = "latest") -> PushedImage:
        """Push an OCI image layout or docker archive tar (gzip'd or not) as ``name:tag``.

        Blobs the repository holds are not sent again; an image index's children in the
        archive are pushed before it.
        """
        if not _NAME.fullmatch(name):
            raise RegistryError(f"{name!r} is not a repository name")
        if not _TAG.fullmatch(tag):
            raise RegistryError(f"{tag!r} is not a tag")
        with _open_tar(archive) as tar:
            files = _Archive(tar)
            if files.has("index.json"):
                blobs, manifests = _oci_layout(files)
            elif files.has("manifest.json"):
                blobs, manifests = _docker_archive(files)
            else:
                raise RegistryError("neither an OCI image layout nor a docker archive")
            for blob in blobs:
                if not self.has_blob(name, blob.digest):
                    with files.open(blob.member) as body:
                        self.upload_blob(name, blob.digest, blob.size, body)
        for child in manifests[:-1]:
            self.put_manifest(name, child.digest, child.media_type, child.data)
        top = manifests[-1]
        digest = self.put_manifest(name, tag, top.media_type, top.data)
        if digest != top.digest:
            raise RegistryError(f"the registry stored {digest}, not {top.digest}")
        return PushedImage(
            name=name,
            tag=tag,
            digest=digest,
            media_type=top.media_type,
            by_digest=f"{self.address}/{name}@{digest}",
            by_tag=f"{self.address}/{name}:{tag}",
        )


class _open_tar:  # noqa: N801 - used as a function
    """A tar opened from a path or bytes (``r:*``: gzip'd or not), closed with the block."""

    def __init__(self, archive: Path | bytes) -> None:
        self._archive = archive
        self._tar: tarfile.TarFile | None = None

    def __enter__(self) -> tarfile.TarFile:
        try:
            if isinstance(self._archive, bytes):
                data = self._archive
                if data.startswith(b"\x1f\x8b"):
                    data = gzip.decompress(data)
                self._tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
            else:
                self._tar = tarfile.open(self._archive, mode="r:*")
        except (tarfile.TarError, OSError) as error:
            raise RegistryError(f"not a tar archive: {error}") from error
        return self._tar

    def __exit__(self, *exc: object) -> None:
        if self._tar is not None:
            self._tar.close()


class LocalRegistry:
    """``registry serve`` on 127.0.0.1 for the duration of a ``with`` block (or start/stop).

    Args:
        work_dir: where its configuration, certificates, htpasswd, storage and log go
            (a temporary directory, removed on stop, when not given).
        ca: the CA that signs the serving certificate (with ``serving`` unset, a serving
            certificate is made and signed by it); neither given: a CA of its own is made.
        serving: a serving certificate and key for ``IP:127.0.0.1`` (``ca`` must be given).
        username: the user the registry knows; the password is generated unless given.
    """

    def __init__(
        self,
        work_dir: Path | None = None,
        *,
        ca: CertKey | None = None,
        serving: CertKey | None = None,
        username: str = "pando-pusher",
        password: str | None = None,
        binary: Path | None = None,
    ) -> None:
        if serving is not None and ca is None:
            raise ValueError("a serving certificate needs the CA that signed it (ca=...)")
        self.binary = binary
        self._ca = ca
        self._serving = serving
        self.username = username
        self.password = password or secrets.token_urlsafe(24)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.work_dir = work_dir
        self.port = 0
        self._component: Component | None = None
        self._exit_registered = False

    @classmethod
    def for_pki(cls, pki: Pki, work_dir: Path | None = None, **options: Any) -> Self:
        """A registry serving the local cluster's registry certificate (signed by its CA)."""
        return cls(work_dir, ca=pki.ca, serving=pki.registry, **options)

    def __repr__(self) -> str:
        return f"LocalRegistry({self.address!r}, user={self.username!r})"

    # -- where things are ------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>`` (the port is chosen on the first start)."""
        return f"127.0.0.1:{self.port}"

    @property
    def _dir(self) -> Path:
        if self.work_dir is None:
            raise ClusterError("the registry was never started")
        return self.work_dir

    @property
    def ca_cert(self) -> Path:
        """The PEM certificate of the CA that signed the registry's certificate."""
        if self._ca is None:
            raise ClusterError("the registry was never started")
        return self._ca.cert

    @property
    def password_file(self) -> Path:
        """A file (``0600``) holding the password and a newline."""
        return self._dir / "password"

    @property
    def storage_dir(self) -> Path:
        """The registry's filesystem storage."""
        return self._dir / "storage"

    @property
    def log_path(self) -> Path:
        """The registry's log (stdout and stderr)."""
        return self._dir / "registry.log"

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts :attr:`ca_cert` only."""
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def client(self, *, auth: bool = True, password: str | None = None) -> RegistryClient:
        """A client of this registry: with the user's credentials (or ``password``), or none."""
        return RegistryClient(
            self.address,
            self.ssl_context(),
            username=self.username if auth or password is not None else None,
            password=password if password is not None else (self.password if auth else None),
        )

    def push(self, archive: Path | bytes, name: str, tag: str = "latest") -> PushedImage:
        """Push an image archive with the user's credentials (see :meth:`RegistryClient.push`)."""
        return self.client().push(archive, name, tag)

    def adapter_settings(self) -> dict[str, str]:
        """The Kubernetes adapter's ``image_registry`` settings for this registry and user."""
        return {
            "image_registry": self.address,
            "image_registry_ca_file": str(self.ca_cert),
            "image_registry_username": self.username,
            "image_registry_password_file": str(self.password_file),
        }

    def hosts_toml(self) -> str:
        """containerd's ``certs.d/<address>/hosts.toml`` for a node pulling from here: the
        registry's CA trusted; the credentials come from the pod's pull secret.

        The CA is named twice, for the ``[host]`` entry and for the server itself:
        containerd 1.6 asks the ``[host]`` first and the server after it, so an image the
        registry lacks is asked again of the server, which without the CA reports a
        certificate error instead of "not found" (and a server entry alone, for a loopback
        address, is spoken to in plain HTTP).
        """
        url = f"https://{self.address}"
        return (
            f'server = "{url}"\nca = "{self.ca_cert}"\n\n[host."{url}"]\n'
            f'  capabilities = ["pull", "resolve"]\n  ca = "{self.ca_cert}"\n'
        )

    # -- life ------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Certificates, htpasswd, password file and configuration, once per work directory."""
        d = self._dir
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        if self._ca is None:
            self._ca = make_ca(d, "registry-ca")
        if self._serving is None:
            self._serving = issue_server_cert(
                d, self._ca, "registry", "/CN=pando-registry", REGISTRY_SANS
            )
        try:
            import bcrypt  # noqa: PLC0415 - only the registry needs it
        except ImportError as error:
            raise ClusterStartError(
                "the registry's htpasswd needs the PyPI package 'bcrypt' (in the test "
                "dependency group of pyproject.toml)"
            ) from error
        # The lowest cost: the registry checks the password on every request.
        hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        _private(d / "htpasswd", f"{self.username}:{hashed}\n")
        _private(self.password_file, self.password + "\n")
        self.storage_dir.mkdir(exist_ok=True)
        config = {
            "version": "0.1",
            "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.storage_dir)},
                "delete": {"enabled": True},
                "maintenance": {"uploadpurging": {"enabled": False}},
            },
            "http": {
                "addr": self.address,
                "secret": secrets.token_hex(16),
                "tls": {"certificate": str(self._serving.cert), "key": str(self._serving.key)},
                "headers": {"X-Content-Type-Options": ["nosniff"]},
            },
            "auth": {"htpasswd": {"realm": REALM, "path": str(d / "htpasswd")}},
            "health": {"storagedriver": {"enabled": False}},
        }
        # YAML reads JSON.
        (d / "config.yml").write_text(json.dumps(config, indent=2) + "\n")

    def start(self) -> Self:
        """Start the registry and wait until ``/v2/`` answers 401 over TLS.

        Raises:
            ClusterStartError: it did not start (the message ends with its log's tail).
        """
        if self._component is not None and self._component.running():
            return self
        binary = self.binary or find_registry()
        if self.work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="pando-registry-")
            self.work_dir = Path(self._tmp.name)
        chosen_here = not self.port

        def attempt() -> None:
            if not self.port:
                (self.port,) = free_ports(1)
            self._prepare()
            self._launch(binary)
            self._wait_ready()

        def choose_again() -> None:
            self.stop(keep=True)
            self.port = 0

        try:
            if chosen_here:
                retry_on_taken_port(attempt, reset=choose_again)
            else:  # a restart keeps its port: clients were told it
                attempt()
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, binary: Path) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self._dir),
            # No telemetry exporter: nothing is sent anywhere.
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
        }
        argv = [str(binary), "serve", str(self._dir / "config.yml")]
        self._component = Component("registry", argv, self.log_path, cwd=self._dir, env=env)
        self._component.start()
        if not self._exit_registered:
            atexit.register(self.stop)
            self._exit_registered = True

    def _wait_ready(self, timeout: float = 30.0) -> None:
        """Until ``/v2/`` answers 401 (it asks for credentials) over TLS."""
        anonymous = self.client(auth=False)

        def up() -> bool:
            try:
                return anonymous.ping() == http.HTTPStatus.UNAUTHORIZED
            except RegistryError:
                return False

        def died() -> str | None:
            code = self._component.exit_code() if self._component else None
            if code is None:
                return None
            return f"the registry exited with code {code}:\n{_tail(self.log_path)}"

        try:
            ready = wait_until(up, timeout=timeout, abort=died)
        except RuntimeError as error:
            raise ClusterStartError(str(error)) from None
        if not ready:
            tail_ = _tail(self.log_path)
            message = f"the registry did not answer on {self.address} in {timeout:g} s"
            raise ClusterStartError(f"{message}:\n{tail_}")

    def running(self) -> bool:
        """Whether the registry process runs."""
        return self._component is not None and self._component.running()

    def stop(self, *, keep: bool = False) -> None:
        """Stop the registry; its temporary work directory goes too unless ``keep``.

        A registry stopped with ``keep=True`` can be started again on the same port, with
        the same storage and password.
        """
        if self._component is not None:
            self._component.stop()
            self._component = None
        if keep:
            return
        if self._exit_registered:
            atexit.unregister(self.stop)
            self._exit_registered = False
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.work_dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by this user only."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _tail(path: Path, lines: int = 30) -> str:
    return tail(path, lines)
