"""Image archives read for a push: an OCI image layout or a ``docker save`` archive.

:func:`read_archive` takes a seekable file holding a plain tar (the import decompresses a
gzip'd, bzip2'd or xz'd archive while it spools it) and says what to push: the blobs (where
their bytes lie in the file) and the manifests, children first, the image's last. Nothing is
extracted: members are found by name, links followed inside the archive.

- An **OCI image layout** (``index.json``, ``blobs/sha256/...``; what ``docker save`` writes
  since Docker 25 too) is pushed byte for byte, so the image keeps its digest. ``index.json``
  must name one image (the same digest under several names counts once). An image index is
  pushed with its children; an index whose children are not all in the archive (``docker
  save`` of a multi-platform image keeps only this machine's platform) is replaced by the one
  platform image the archive holds whole.
- A **docker archive** (``manifest.json`` listing one image: its configuration and layer
  tars) becomes an OCI image manifest. Layers are kept as they are (no recompression, so a
  re-import finds the same digests): a gzip or zstd layer gets its compressed media type, a
  plain tar ``application/vnd.oci.image.layer.v1.tar``, and must be the layer the
  configuration names (its ``diff_ids``).

Anything else, or a member that contradicts another, is :class:`InvalidInput` whose problems
name the member (``archive/<path>``).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import tarfile
from typing import IO, Any

import attrs

from pando_runtime import InvalidInput, Problem

__all__ = [
    "DOCKER_CONFIG",
    "DOCKER_MANIFEST",
    "DOCKER_MANIFEST_LIST",
    "MANIFEST_TYPES",
    "OCI_CONFIG",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "ArchiveBlob",
    "ArchiveManifest",
    "ImageArchive",
    "layer_media_type",
    "read_archive",
    "repository_name",
]

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
IMAGE_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
MANIFEST_TYPES = (*IMAGE_TYPES, *INDEX_TYPES)
"""Every manifest media type pushed or asked for."""

JSON_LIMIT = 4 * 1024 * 1024
"""The most bytes of a JSON member (index, manifest, configuration) read."""
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_LINK_DEPTH = 16
_NESTING = 4
_ATTESTATION = "attestation-manifest"


@attrs.frozen
class ArchiveBlob:
    """A blob to push: its digest, size and where its bytes start in the archive file."""

    digest: str
    size: int
    offset: int
    member: str


@attrs.frozen
class ArchiveManifest:
    """A manifest to push, byte for byte."""

    digest: str
    media_type: str
    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")


@attrs.frozen
class ImageArchive:
    """What an archive holds: blobs, then manifests (children first, the image last)."""

    format: str
    """``oci-layout`` or ``docker-archive``."""
    name: str | None
    """The image's name in the archive (``docker.io/library/busybox:1.37``), if it has one."""
    blobs: tuple[ArchiveBlob, ...]
    manifests: tuple[ArchiveManifest, ...]

    @property
    def image(self) -> ArchiveManifest:
        """The manifest the import's reference names."""
        return self.manifests[-1]

    @property
    def blob_bytes(self) -> int:
        """The size of every blob, added up."""
        return sum(b.size for b in self.blobs)


def _bad(path: str, message: str, code: str = "bad_tar") -> InvalidInput:
    where = f"archive/{path}" if path else "archive"
    return InvalidInput(
        "the image archive is not valid",
        [Problem(where, message, code)],
        remedy="Import an OCI image layout or a 'docker save' archive of one image, as a tar "
        "(gzip, bzip2 or xz compressed or not).",
    )


def layer_media_type(head: bytes) -> str:
    """The OCI media type of a layer from its first bytes: gzip, zstd, else a plain tar."""
    if head.startswith(b"\x1f\x8b"):
        return OCI_LAYER + "+gzip"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return OCI_LAYER + "+zstd"
    return OCI_LAYER


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Members:
    """The regular files of a tar by normalised name, links resolved inside the archive."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        file.seek(0)
        try:
            with tarfile.open(fileobj=file, mode="r:") as tar:
                infos = tar.getmembers()
        except (tarfile.TarError, EOFError) as error:
            raise _bad("", f"not a tar archive ({error})") from None
        self._infos = {_norm(i.name): i for i in infos}

    def has(self, name: str) -> bool:
        return _norm(name) in self._infos

    def find(self, name: str) -> tarfile.TarInfo:
        """The regular file ``name`` is, after links; a problem at ``name`` otherwise."""
        asked = path = _norm(name)
        for _ in range(_LINK_DEPTH):
            info = self._infos.get(path)
            if info is None:
                raise _bad(asked, "is not in the archive")
            if info.issym():
                path = _norm(posixpath.join(posixpath.dirname(path), info.linkname))
            elif info.islnk():
                path = _norm(info.linkname)
            elif info.isfile() and info.sparse is None:
                return info
            else:
                raise _bad(asked, "is not a regular file")
        raise _bad(asked, "has too many links")

    def read(self, name: str, limit: int = JSON_LIMIT) -> bytes:
        info = self.find(name)
        if info.size > limit:
            raise _bad(name, f"is {info.size} bytes, more than {limit}", "too_large")
        self._file.seek(info.offset_data)
        data = self._file.read(info.size)
        if len(data) != info.size:
            raise _bad(name, "is cut short")
        return data

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.read(name))
        except ValueError:
            raise _bad(name, "is not JSON", "syntax") from None

    def hash(self, name: str) -> tuple[str, int, bytes]:
        """The sha256 digest, size and first bytes of a member."""
        info = self.find(name)
        self._file.seek(info.offset_data)
        h = hashlib.sha256()
        left = info.size
        head = b""
        while left:
            chunk = self._file.read(min(left, 1 << 20))
            if not chunk:
                raise _bad(name, "is cut short")
            head = head or chunk[:8]
            h.update(chunk)
            left -= len(chunk)
        return "sha256:" + h.hexdigest(), info.size, head


def _norm(name: str) -> str:
    return posixpath.normpath("/" + name).lstrip("/")


def _blob_path(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def _object(value: Any, path: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(path, f"is not {what}", "wrong_type")
    return value


def _descriptor(value: Any, path: str) -> tuple[str, int | None, str | None]:
    """A descriptor's digest, size and media type (sha256 digests only)."""
    d = _object(value, path, "a descriptor (an object with a digest)")
    digest, size, media_type = d.get("digest"), d.get("size"), d.get("mediaType")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise _bad(path, f"names the digest {digest!r}, not sha256:<64 hex digits>")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise _bad(path, f"gives the size {size!r} of {digest}")
    if media_type is not None and not isinstance(media_type, str):
        raise _bad(path, f"gives the media type {media_type!r} of {digest}")
    return digest, size, media_type


class _OciLayout:
    """Walks an OCI image layout from the one image its ``index.json`` names."""

    def __init__(self, members: _Members) -> None:
        self._members = members
        self.blobs: dict[str, ArchiveBlob] = {}
        self.manifests: list[ArchiveManifest] = []

    def read(self) -> ImageArchive:
        index = _object(self._members.json("index.json"), "index.json", "an object")
        listed = index.get("manifests")
        if not isinstance(listed, list) or not listed:
            raise _bad("index.json", "names no image")
        found = {_descriptor(d, "index.json")[0]: d for d in reversed(listed)}
        if len(found) > 1:
            raise _bad(
                "index.json",
                f"names {len(found)} images; an archive must hold one image",
                "conflict",
            )
        (top,) = found.values()
        self._walk(top, "index.json", 0)
        return ImageArchive(
            format="oci-layout",
            name=self._name(top),
            blobs=tuple(self.blobs.values()),
            manifests=tuple(self.manifests),
        )

    def _name(self, top: dict[str, Any]) -> str | None:
        names = top.get("annotations") or {}
        name = names.get("io.containerd.image.name") if isinstance(names, dict) else None
        if isinstance(name, str) and name:
            return name
        if self._members.has("manifest.json"):  # docker save writes both
            return _docker_name(self._members.json("manifest.json"))
        return None

    def _blob(self, digest: str, size: int | None, where: str) -> ArchiveBlob:
        path = _blob_path(digest)
        if not self._members.has(path):
            raise _bad(path, f"is not in the archive ({where} names it)")
        info = self._members.find(path)
        if size is not None and info.size != size:
            raise _bad(path, f"is {info.size} bytes; {where} says {size}")
        return ArchiveBlob(digest, info.size, info.offset_data, path)

    def _walk(self, descriptor: dict[str, Any], where: str, depth: int) -> None:
        digest, size, declared = _descriptor(descriptor, where)
        if depth > _NESTING:
            raise _bad(where, f"nests image indexes more than {_NESTING} deep")
        path = _blob_path(digest)
        self._blob(digest, size, where)
        data = self._members.read(path)
        if _sha256(data) != digest:
            raise _bad(path, "does not match its digest")
        try:
            body = _object(json.loads(data), path, "a manifest (a JSON object)")
        except ValueError:
            raise _bad(path, "is not JSON", "syntax") from None
        media_type = _media_type(declared, body, path)
        if media_type in INDEX_TYPES:
            if not self._walk_index(body, path, depth):
                return  # replaced by the one platform's image it holds whole
        else:
            layers = body.get("layers", [])
            if body.get("config") is None or not isinstance(layers, list):
                raise _bad(path, "is not an image manifest (no config or no list of layers)")
            for part in [body["config"], *layers]:
                d, s, _ = _descriptor(part, path)
                self.blobs.setdefault(d, self._blob(d, s, path))
        if all(m.digest != digest for m in self.manifests):
            self.manifests.append(ArchiveManifest(digest, media_type, data))

    def _walk_index(self, body: dict[str, Any], path: str, depth: int) -> bool:
        """Walk an index's children; false when the index is to be replaced by its one image.

        Only the archive's own image may be an incomplete index: the one platform's image
        the archive holds stands for it.
        """
        children = body.get("manifests")
        if not isinstance(children, list) or not children:
            raise _bad(path, "is an image index that lists no manifest")
        present = [c for c in children if self._members.has(_blob_path(_descriptor(c, path)[0]))]
        if len(present) == len(children):
            for child in children:
                self._walk(child, path, depth + 1)
            return True
        images = [c for c in present if not _attestation(c)]
        if depth > 0 or len(images) != 1:
            missing = len(children) - len(present)
            raise _bad(
                path,
                f"is an image index of {len(children)} manifests, {missing} of them not in the "
                "archive, and the archive does not hold exactly one platform's image whole",
            )
        self._walk(images[0], path, depth + 1)
        return False


def _attestation(descriptor: dict[str, Any]) -> bool:
    notes = descriptor.get("annotations") or {}
    platform = descriptor.get("platform") or {}
    return (isinstance(notes, dict) and notes.get("vnd.docker.reference.type") == _ATTESTATION) or (
        isinstance(platform, dict) and platform.get("os") == "unknown"
    )


def _media_type(declared: str | None, body: dict[str, Any], path: str) -> str:
    own = body.get("mediaType")
    if own is not None and not isinstance(own, str):
        raise _bad(path, f"gives the media type {own!r}")
    if declared and own and declared != own:
        raise _bad(path, f"is a {own}, but is named as a {declared}", "conflict")
    media_type = declared or own or (OCI_INDEX if "manifests" in body else OCI_MANIFEST)
    if media_type not in MANIFEST_TYPES:
        raise _bad(path, f"is a {media_type}, not an image manifest or index")
    return media_type


def _docker_name(entries: Any) -> str | None:
    if isinstance(entries, list) and entries and isinstance(entries[0], dict):
        tags = entries[0].get("RepoTags")
        if isinstance(tags, list) and tags and isinstance(tags[0], str):
            return tags[0]
    return None


def _docker_archive(members: _Members) -> ImageArchive:
    entries = members.json("manifest.json")
    if not isinstance(entries, list) or not entries:
        raise _bad("manifest.json", "lists no image")
    if len(entries) > 1:
        raise _bad(
            "manifest.json",
            f"lists {len(entries)} images; an archive must hold one image",
            "conflict",
        )
    entry = _object(entries[0], "manifest.json", "an object with Config and Layers")
    config_path, layer_paths = entry.get("Config"), entry.get("Layers")
    if not isinstance(config_path, str) or not isinstance(layer_paths, list):
        raise _bad("manifest.json", "gives no Config or no Layers")
    config_data = members.read(config_path)
    try:
        config = _object(json.loads(config_data), config_path, "an image configuration")
    except ValueError:
        raise _bad(config_path, "is not JSON", "syntax") from None
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or len(diff_ids) != len(layer_paths):
        raise _bad(
            config_path,
            f"names {len(diff_ids) if isinstance(diff_ids, list) else 'no'} layers "
            f"(rootfs.diff_ids); manifest.json lists {len(layer_paths)}",
            "conflict",
        )
    config_info = members.find(config_path)
    config_digest = _sha256(config_data)
    blobs = {
        config_digest: ArchiveBlob(
            config_digest, len(config_data), config_info.offset_data, config_path
        )
    }
    layers = []
    for i, path in enumerate(layer_paths):
        if not isinstance(path, str):
            raise _bad("manifest.json", f"Layers[{i}] is not a path", "wrong_type")
        digest, size, head = members.hash(path)
        media_type = layer_media_type(head)
        if media_type == OCI_LAYER and digest != diff_ids[i]:
            raise _bad(
                path,
                f"is not the layer the configuration names at rootfs.diff_ids[{i}]",
                "conflict",
            )
        blobs.setdefault(digest, ArchiveBlob(digest, size, members.find(path).offset_data, path))
        layers.append({"mediaType": media_type, "digest": digest, "size": size})
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config_data)},
        "layers": layers,
    }
    data = json.dumps(manifest, separators=(",", ":")).encode()
    return ImageArchive(
        format="docker-archive",
        name=_docker_name(entries),
        blobs=tuple(blobs.values()),
        manifests=(ArchiveManifest(_sha256(data), OCI_MANIFEST, data),),
    )


def read_archive(file: IO[bytes]) -> ImageArchive:
    """What to push of the image archive in ``file`` (a seekable plain tar).

    Raises:
        InvalidInput: not an OCI image layout nor a docker archive of one image, or a member
            contradicts another; each problem names its member.
    """
    members = _Members(file)
    if members.has("index.json"):
        return _OciLayout(members).read()
    if members.has("manifest.json"):
        return _docker_archive(members)
    raise _bad("", "holds neither index.json (an OCI image layout) nor manifest.json (docker save)")


_COMPONENT = re.compile(r"[^a-z0-9]+")
_REPOSITORY_MAX = 255


def repository_name(prefix: str, name: str | None) -> str:
    """The repository an image named ``name`` in its archive goes to, under ``prefix``.

    The registry host, the tag or digest and Docker Hub's ``library/`` are dropped, every
    component lower-cased with runs of other characters made one ``-``:
    ``docker.io/library/Busybox:1.37`` under ``pando`` is ``pando/busybox``. No usable name:
    ``<prefix>/image``.
    """
    path = (name or "").split("@", 1)[0]
    head, _, last = path.rpartition("/")
    path = f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]
    parts = path.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    if len(parts) > 1 and parts[0] == "library":
        parts = parts[1:]
    clean = [c for c in (_COMPONENT.sub("-", p.lower()).strip("-") for p in parts) if c]
    full = "/".join([*(p for p in prefix.split("/") if p), *(clean or ["image"])])
    return full[:_REPOSITORY_MAX].rstrip("/-")
