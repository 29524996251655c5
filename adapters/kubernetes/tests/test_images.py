"""Images: archives read and converted (no server), then imported into a real registry.

The registry is the harness's (``image_registry``: CNCF Distribution on loopback, TLS and a
password); no cluster is needed: the adapter's kubeconfig names nothing, and images, look-ups
and pull credentials never touch the API server. Archives are built here with tarfile.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import logging
import lzma
import secrets
import tarfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from localcluster.registry import LocalRegistry
from pando_runtime_kubernetes._adapter import KubernetesAdapter
from pando_runtime_kubernetes._multi import MultiClusterAdapter
from pando_runtime_kubernetes.api._image_archive import (
    OCI_INDEX,
    OCI_MANIFEST,
    read_archive,
    repository_name,
)
from pando_runtime_kubernetes.api._image_spool import Spool
from pando_runtime_kubernetes.api._registry import BlobBody
from pando_runtime_kubernetes.features._registry_settings import split_reference
from pando_runtime_kubernetes.manifests import _namespace_objects as ns_objects

import pando_runtime as pr

pytestmark = pytest.mark.anyio

# -- building archives ------------------------------------------------------------------------


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_of(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
        for path, target in (links or {}).items():
            info = tarfile.TarInfo(path)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return out.getvalue()


def layer(text: bytes, name: str = "hello.txt") -> bytes:
    return tar_of({name: text})


def config_of(layers: list[bytes], arch: str = "amd64") -> bytes:
    diff_ids = [sha(gzip.decompress(x) if x[:2] == b"\x1f\x8b" else x) for x in layers]
    return json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Cmd": ["cat", "/hello.txt"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
    ).encode()


def docker_archive(
    layers: list[bytes], *, tags: list[str] | None = None, duplicate: bool = False
) -> bytes:
    """``docker save``'s legacy layout: ``<id>/layer.tar``, ``<id>.json`` and manifest.json.

    ``duplicate``: the last layer listed twice, the second a symlink to the first, as docker
    save writes a repeated layer.
    """
    config = config_of(layers + (layers[-1:] if duplicate else []))
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    paths = []
    for i, data in enumerate(layers):
        files[f"l{i}/layer.tar"] = data
        paths.append(f"l{i}/layer.tar")
    if duplicate:
        links["dup/layer.tar"] = f"../l{len(layers) - 1}/layer.tar"
        paths.append("dup/layer.tar")
    files[f"{sha(config)[7:]}.json"] = config
    entry = {"Config": f"{sha(config)[7:]}.json", "RepoTags": tags, "Layers": paths}
    files["manifest.json"] = json.dumps([entry]).encode()
    return tar_of(files, links)


def manifest_of(layers: list[bytes], config: bytes) -> bytes:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar"
                    + ("+gzip" if x[:2] == b"\x1f\x8b" else ""),
                    "digest": sha(x),
                    "size": len(x),
                }
                for x in layers
            ],
        },
        indent=1,  # not as the adapter writes it: the digest must be kept as it is
    ).encode()


def oci_layout(
    blobs: list[bytes], top: bytes, *, media_type: str = OCI_MANIFEST, name: str | None = None
) -> bytes:
    descriptor: dict[str, Any] = {"mediaType": media_type, "digest": sha(top), "size": len(top)}
    if name:
        descriptor["annotations"] = {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
        }
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [descriptor]}
    files = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": json.dumps(index).encode(),
    }
    for blob in [*blobs, top]:
        files[f"blobs/sha256/{sha(blob)[7:]}"] = blob
    return tar_of(files)


def oci_image(text: bytes, *, name: str | None = None, gzipped: bool = False) -> tuple[bytes, str]:
    """A one-layer OCI layout and its manifest's digest."""
    plain = layer(text)
    data = gzip.compress(plain, mtime=0) if gzipped else plain
    config = config_of([data])
    manifest = manifest_of([data], config)
    return oci_layout([data, config], manifest, name=name), sha(manifest)


def platform_index(images: list[tuple[str, bytes]], extra: list[dict[str, Any]] = ()) -> bytes:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": sha(m),
                    "size": len(m),
                    "platform": {"os": "linux", "architecture": arch},
                }
                for arch, m in images
            ]
            + list(extra),
        }
    ).encode()


def read(data: bytes) -> Any:
    return read_archive(io.BytesIO(data))


def problems(error: pytest.ExceptionInfo[pr.InvalidInput]) -> list[tuple[str, str]]:
    return [(p.path, p.code) for p in error.value.problems]


# -- archives, no server --------------------------------------------------------------------


def test_a_docker_archive_becomes_an_oci_manifest_with_layers_kept() -> None:
    plain, zipped = layer(b"a\n"), gzip.compress(layer(b"b\n", "b.txt"), mtime=0)
    data = docker_archive([plain, zipped], tags=["docker.io/library/Hello:1"], duplicate=True)
    archive = read(data)
    assert archive.format == "docker-archive"
    assert archive.name == "docker.io/library/Hello:1"
    manifest = json.loads(archive.image.data)
    config = config_of([plain, zipped, zipped])
    assert manifest["mediaType"] == OCI_MANIFEST
    assert manifest["config"] == {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        "digest": sha(config),
        "size": len(config),
    }
    assert [(x["mediaType"], x["digest"], x["size"]) for x in manifest["layers"]] == [
        ("application/vnd.oci.image.layer.v1.tar", sha(plain), len(plain)),
        ("application/vnd.oci.image.layer.v1.tar+gzip", sha(zipped), len(zipped)),
        ("application/vnd.oci.image.layer.v1.tar+gzip", sha(zipped), len(zipped)),
    ]
    assert archive.image.digest == sha(archive.image.data)
    # Each blob once (the symlinked duplicate too), found where its bytes lie.
    assert [b.digest for b in archive.blobs] == [sha(config), sha(plain), sha(zipped)]
    for blob in archive.blobs:
        assert sha(data[blob.offset : blob.offset + blob.size]) == blob.digest
    # The same archive always gives the same manifest: a re-import finds it.
    assert read(data).image == archive.image


def test_an_oci_layout_is_pushed_byte_for_byte() -> None:
    data, digest = oci_image(b"hi\n", name="registry.example/team/app:2", gzipped=True)
    archive = read(data)
    assert archive.format == "oci-layout"
    assert archive.name == "registry.example/team/app:2"
    assert archive.image.digest == digest
    assert sha(archive.image.data) == digest
    assert len(archive.blobs) == 2
    for blob in archive.blobs:
        assert sha(data[blob.offset : blob.offset + blob.size]) == blob.digest


def test_an_index_is_pushed_after_its_children() -> None:
    images = []
    blobs: list[bytes] = []
    for arch in ("amd64", "arm64"):
        x = layer(arch.encode())
        config = config_of([x], arch)
        images.append((arch, manifest_of([x], config)))
        blobs += [x, config]
    index = platform_index(images)
    archive = read(oci_layout(blobs + [m for _, m in images], index, media_type=OCI_INDEX))
    assert [(m.digest, m.media_type) for m in archive.manifests] == [
        (sha(images[0][1]), OCI_MANIFEST),
        (sha(images[1][1]), OCI_MANIFEST),
        (sha(index), OCI_INDEX),
    ]
    assert len(archive.blobs) == 4


def test_an_index_missing_other_platforms_is_replaced_by_the_one_it_holds() -> None:
    """docker save of a multi-platform image keeps only this machine's platform."""
    x = layer(b"amd64")
    config = config_of([x])
    amd64 = manifest_of([x], config)
    arm64 = manifest_of([layer(b"arm64")], config_of([layer(b"arm64")], "arm64"))
    attestation = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST}).encode()
    index = platform_index(
        [("amd64", amd64), ("arm64", arm64)],
        [
            {
                "mediaType": OCI_MANIFEST,
                "digest": sha(attestation),
                "size": len(attestation),
                "platform": {"os": "unknown", "architecture": "unknown"},
            }
        ],
    )
    archive = read(oci_layout([x, config, amd64, attestation], index, media_type=OCI_INDEX))
    assert [m.digest for m in archive.manifests] == [sha(amd64)]
    assert {b.digest for b in archive.blobs} == {sha(x), sha(config)}


def test_what_is_not_an_image_is_invalid_input_naming_the_member() -> None:
    good_layer = layer(b"x")
    config = config_of([good_layer])
    manifest = manifest_of([good_layer], config)
    cases: list[tuple[bytes, list[tuple[str, str]]]] = [
        (b"not a tar at all" * 100, [("archive", "bad_tar")]),
        (tar_of({"hello": b"x"}), [("archive", "bad_tar")]),
        (
            tar_of({"index.json": b"{", "oci-layout": b"{}"}),
            [("archive/index.json", "syntax")],
        ),
        (
            oci_layout([config], manifest),  # the layer is missing
            [(f"archive/blobs/sha256/{sha(good_layer)[7:]}", "bad_tar")],
        ),
        (
            oci_layout([good_layer, config], manifest).replace(
                manifest, manifest.replace(b'"schemaVersion": 2', b'"schemaVersion": 3')
            ),
            [(f"archive/blobs/sha256/{sha(manifest)[7:]}", "bad_tar")],
        ),
        (
            docker_archive([good_layer, good_layer]).replace(
                json.dumps([sha(good_layer)] * 2).encode(),
                json.dumps([sha(good_layer), sha(b"other")]).encode(),
            ),
            [("archive/l1/layer.tar", "conflict")],
        ),
    ]
    two_images = {
        "schemaVersion": 2,
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": sha(b"a"), "size": 1},
            {"mediaType": OCI_MANIFEST, "digest": sha(b"b"), "size": 1},
        ],
    }
    cases.append(
        (
            tar_of({"index.json": json.dumps(two_images).encode()}),
            [("archive/index.json", "conflict")],
        )
    )
    docker_two = json.dumps([{"Config": "c.json", "Layers": []}] * 2).encode()
    cases.append((tar_of({"manifest.json": docker_two}), [("archive/manifest.json", "conflict")]))
    for data, expected in cases:
        with pytest.raises(pr.InvalidInput) as caught:
            read(data)
        assert problems(caught) == expected, caught.value


@pytest.mark.parametrize(
    ("prefix", "name", "expected"),
    [
        ("pando", "docker.io/library/busybox:1.37", "pando/busybox"),
        ("pando", "registry.example:5000/Team/My_App@sha256:" + "0" * 64, "pando/team/my-app"),
        ("pando/imports", "localhost/app", "pando/imports/app"),
        ("", "app:latest", "app"),
        ("pando", None, "pando/image"),
        ("pando", "!!!", "pando/image"),
    ],
)
def test_repository_names(prefix: str, name: str | None, expected: str) -> None:
    assert repository_name(prefix, name) == expected


def test_references_are_split_as_runtimes_read_them() -> None:
    digest = "sha256:" + "a" * 64
    assert split_reference("nginx:1.27") is None
    assert split_reference("library/nginx") is None
    assert split_reference("127.0.0.1:5000/pando/app@" + digest) == (
        "127.0.0.1:5000",
        "pando/app",
        digest,
    )
    assert split_reference("Registry.Example/app:2") == ("registry.example", "app", "2")
    assert split_reference("localhost/app") == ("localhost", "app", "latest")


# -- settings -------------------------------------------------------------------------------


def test_registry_settings_are_checked_when_the_adapter_is_made(tmp_path: Path) -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        KubernetesAdapter(
            {
                "image_registry": "https://registry.example/v2",
                "image_registry_repository": "Bad Name",
                "image_registry_username": "pusher",
            }
        )
    assert problems(caught) == [
        ("image_registry_password_file", "missing"),
        ("image_registry", "invalid"),
        ("image_registry_repository", "invalid"),
    ]
    with pytest.raises(pr.InvalidConfig) as caught:
        KubernetesAdapter({"image_registry_ca_file": "/ca.pem"})
    assert problems(caught) == [("image_registry_ca_file", "conflict")]


async def test_image_import_is_declared_only_where_a_registry_is_configured(
    tmp_path: Path,
) -> None:
    kubeconfig = str(tmp_path / "no-kubeconfig")  # capabilities need no cluster
    async with contextlib_closing(KubernetesAdapter({"kubeconfig": kubeconfig})) as plain:
        caps = await plain.capabilities()
        assert not caps.supports(pr.Capability.IMAGE_IMPORT)
        assert await plain.has_image("127.0.0.1:5000/anything:1")
        with pytest.raises(pr.CapabilityUnsupported) as caught:
            await plain.import_image(pr.BytesReceiveStream(b"x"))
        assert caught.value.capability == "image_import"
    config = {"kubeconfig": kubeconfig, "image_registry": "registry.example:5000"}
    async with contextlib_closing(KubernetesAdapter(config)) as adapter:
        caps = await adapter.capabilities()
        assert caps.image_delivery == (pr.ImageDelivery.REGISTRY, pr.ImageDelivery.IMPORT)


def test_the_multi_cluster_adapter_imports_only_into_a_registry_all_members_share() -> None:
    one = KubernetesAdapter({"image_registry": "registry.example:5000"})
    same = KubernetesAdapter({"image_registry": "registry.example:5000"})
    other = KubernetesAdapter({"image_registry": "other.example:5000"})
    assert MultiClusterAdapter._one_registry({"a": one, "b": same})
    assert not MultiClusterAdapter._one_registry({"a": one, "b": other})


class contextlib_closing:  # noqa: N801 - an async closing() for the adapter
    def __init__(self, adapter: KubernetesAdapter) -> None:
        self.adapter = adapter

    async def __aenter__(self) -> KubernetesAdapter:
        return self.adapter

    async def __aexit__(self, *exc: object) -> None:
        await self.adapter.aclose()


# -- against the registry --------------------------------------------------------------------


def settings_for(registry: LocalRegistry, tmp_path: Path, **override: Any) -> dict[str, Any]:
    return {
        "kubeconfig": str(tmp_path / "no-kubeconfig"),
        **registry.adapter_settings(),
        **override,
    }


@pytest.fixture
def adapter(image_registry: LocalRegistry, tmp_path: Path) -> Any:
    return KubernetesAdapter(settings_for(image_registry, tmp_path))


async def test_import_a_docker_archive_then_find_it(
    adapter: KubernetesAdapter, image_registry: LocalRegistry
) -> None:
    text = b"docker archive " + str(id(adapter)).encode()
    data = docker_archive([layer(text)], tags=["hello-docker:1"])
    try:
        reference = await adapter.import_image(pr.BytesReceiveStream(data, chunk_size=4096))
        expected = read(data).image.digest
        assert reference == f"{image_registry.address}/pando/hello-docker@{expected}"
        assert await adapter.has_image(reference)
        client = image_registry.client()
        media_type, manifest = client.manifest("pando/hello-docker", expected)
        assert media_type == OCI_MANIFEST
        assert sha(manifest) == expected
        # 1 manifest HEAD, 2 blobs (config, layer) x (HEAD, POST, PUT), 1 manifest PUT.
        assert adapter.images.client is not None
        assert adapter.images.client.calls_by_kind == {
            "manifest HEAD": 2,  # the import's and has_image's
            "blob HEAD": 2,
            "upload POST": 2,
            "blob PUT": 2,
            "manifest PUT": 1,
        }
        # Again: the manifest is there, one call.
        calls = adapter.images.client.calls
        again = await adapter.import_image(pr.BytesReceiveStream(gzip.compress(data)))
        assert again == reference
        assert adapter.images.client.calls == calls + 1
    finally:
        await adapter.aclose()


async def test_import_an_oci_layout_keeps_its_digest(
    adapter: KubernetesAdapter, image_registry: LocalRegistry
) -> None:
    data, digest = oci_image(b"oci layout\n", name="docker.io/library/hello-oci:2", gzipped=True)

    async def chunks() -> Any:
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    try:
        reference = await adapter.import_image(chunks())
        assert reference == f"{image_registry.address}/pando/hello-oci@{digest}"
        assert await adapter.has_image(reference)
        assert not await adapter.has_image(
            f"{image_registry.address}/pando/hello-oci@sha256:{'0' * 64}"
        )
        assert not await adapter.has_image(f"{image_registry.address}/pando/never:1")
        assert await adapter.has_image("docker.io/library/busybox:1.37")  # pulled on start
        with pytest.raises(pr.InvalidInput):
            await adapter.has_image(f"{image_registry.address}/Bad Name:1")
    finally:
        await adapter.aclose()


async def test_a_bad_archive_is_refused_before_any_call(adapter: KubernetesAdapter) -> None:
    try:
        for data in (b"", b"\x1f\x8b\x08\x00", tar_of({"readme": b"no image"})):
            with pytest.raises(pr.InvalidInput) as caught:
                await adapter.import_image(pr.BytesReceiveStream(data))
            assert caught.value.problems[0].path == "archive"
        assert adapter.images.client is not None
        assert adapter.images.client.calls == 0
    finally:
        await adapter.aclose()


async def test_a_wrong_password_is_a_coded_error_that_never_shows_it(
    image_registry: LocalRegistry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Wr0ng-" + image_registry.password[:8] + "-s3cret"
    wrong = tmp_path / "wrong-password"
    wrong.write_text(secret + "\n")
    adapter = KubernetesAdapter(
        settings_for(image_registry, tmp_path, image_registry_password_file=str(wrong))
    )
    data, digest = oci_image(b"wrong password\n")
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(pr.AdapterFailed) as imported:
            await adapter.import_image(pr.BytesReceiveStream(data))
        with pytest.raises(pr.AdapterUnavailable) as looked:
            await adapter.has_image(f"{image_registry.address}/pando/image@{digest}")
        plan = pr.BundlePlan(
            bundle_id="app",
            workloads=(pr.WorkloadPlan(name="web", image=f"{image_registry.address}/pando/a:1"),),
        )
        planned = await adapter.images.with_pull_auth(plan)
    finally:
        await adapter.aclose()
    for caught in (imported, looked):
        error = caught.value
        assert error.details["registry"] == image_registry.address
        assert error.details["status"] == 401
        assert image_registry.address in error.message
        assert "image_registry_password_file" in error.remedy
        shown = [str(error), repr(error), json.dumps(error.to_dict())]
        assert not any(secret in text for text in shown)
    assert secret not in caplog.text
    assert secret not in repr(adapter.images)
    assert secret not in repr(planned)  # RegistryAuth hides its password
    assert planned.workloads[0].pull_auth is not None
    assert planned.workloads[0].pull_auth.password == secret


async def test_a_registry_that_does_not_answer_is_unavailable(
    image_registry: LocalRegistry, tmp_path: Path
) -> None:
    from localcluster.net import free_ports  # noqa: PLC0415

    (port,) = free_ports(1)
    adapter = KubernetesAdapter(
        settings_for(image_registry, tmp_path, image_registry=f"127.0.0.1:{port}")
    )
    try:
        with pytest.raises(pr.AdapterUnavailable) as caught:
            await adapter.import_image(pr.BytesReceiveStream(oci_image(b"down\n")[0]))
        assert f"127.0.0.1:{port}" in caught.value.message
        with pytest.raises(pr.AdapterUnavailable):
            await adapter.has_image(f"127.0.0.1:{port}/pando/x:1")
    finally:
        await adapter.aclose()


async def test_a_registry_certificate_from_another_ca_is_refused(
    image_registry: LocalRegistry, tmp_path: Path
) -> None:
    adapter = KubernetesAdapter(settings_for(image_registry, tmp_path, image_registry_ca_file=None))
    try:
        with pytest.raises(pr.AdapterUnavailable) as caught:
            await adapter.has_image(f"{image_registry.address}/pando/x:1")
        assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message
    finally:
        await adapter.aclose()


async def test_apps_of_the_registry_get_its_pull_credentials(
    adapter: KubernetesAdapter, image_registry: LocalRegistry, tmp_path: Path
) -> None:
    own_password = secrets.token_hex(8)
    own = pr.RegistryAuth(registry=image_registry.address, username="mine", password=own_password)
    plan = pr.BundlePlan(
        bundle_id="app",
        workloads=(
            pr.WorkloadPlan(
                name="web", image=f"{image_registry.address}/pando/web@sha256:{'1' * 64}"
            ),
            pr.WorkloadPlan(
                name="own", image=f"{image_registry.address}/pando/own:1", pull_auth=own
            ),
            pr.WorkloadPlan(name="hub", image="nginx:1.27"),
        ),
    )
    try:
        planned = await adapter.images.with_pull_auth(plan)
    finally:
        await adapter.aclose()
    web, mine, hub = planned.workloads
    assert web.pull_auth == pr.RegistryAuth(
        registry=image_registry.address,
        username=image_registry.username,
        password=image_registry.password,
    )
    assert mine.pull_auth is own
    assert hub.pull_auth is None
    secret = ns_objects.pull_secret("pando-app", "app", [web.pull_auth, own])
    import base64  # noqa: PLC0415

    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert config["auths"][image_registry.address]["username"] in {"mine", image_registry.username}
    # A read-only pull account, when set, is the one apps get.
    pull_password = tmp_path / "pull-password"
    reader_password = secrets.token_hex(8)
    pull_password.write_text(reader_password + "\n")
    reader = KubernetesAdapter(
        settings_for(
            image_registry,
            tmp_path,
            image_registry_pull_username="reader",
            image_registry_pull_password_file=str(pull_password),
        )
    )
    try:
        planned = await reader.images.with_pull_auth(plan)
    finally:
        await reader.aclose()
    assert planned.workloads[0].pull_auth == pr.RegistryAuth(
        registry=image_registry.address, username="reader", password=reader_password
    )


async def test_a_cancelled_import_leaves_the_adapter_working(
    adapter: KubernetesAdapter, image_registry: LocalRegistry
) -> None:
    data, digest = oci_image(b"after a cancelled import\n")

    async def stalls() -> Any:
        yield data[:1000]
        await anyio.sleep_forever()

    try:
        with anyio.move_on_after(0.3) as scope:
            await adapter.import_image(stalls())
        assert scope.cancelled_caught
        assert adapter.images.client is not None
        assert adapter.images.client.calls == 0
        reference = await adapter.import_image(pr.BytesReceiveStream(data))
        assert reference.endswith(f"@{digest}")
    finally:
        await adapter.aclose()


def test_a_blob_body_reads_its_range_and_stops_when_aborted(tmp_path: Path) -> None:
    path = tmp_path / "spool"
    path.write_bytes(b"0123456789")
    with path.open("rb") as f:
        body = BlobBody(f.fileno(), 2, 5)
    # Its own descriptor: the spool's is closed already.
    assert body.read(3) == b"234"
    assert body.read() == b"56"
    assert body.read() == b""
    body.abort()
    with pytest.raises(OSError, match="cancelled"):
        body.read(1)
    body.close()
    body.close()


@pytest.mark.parametrize(
    "compress",
    [
        lambda d: d,
        lambda d: gzip.compress(d[:500]) + gzip.compress(d[500:]) + b"\0" * 512,
        bz2.compress,
        lzma.compress,
    ],
    ids=["plain", "gzip-two-members-padded", "bzip2", "xz"],
)
def test_archives_are_spooled_decompressed(compress: Any) -> None:
    data = docker_archive([layer(b"spooled\n")])
    out = io.BytesIO()
    spool = Spool(out)
    packed = compress(data)
    spool.feed(packed[:100])
    spool.finish(packed[100:])
    assert out.getvalue() == data
    assert spool.received == len(packed)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "is empty"),
        (gzip.compress(b"x" * 10000)[:-20], "cut short"),
        (b"\x1f\x8b\x08\x00garbage" * 10, "not valid gzip"),
        (b"\x28\xb5\x2f\xfd" + b"\0" * 100, "zstd"),
    ],
)
def test_a_broken_stream_is_invalid_input(data: bytes, says: str) -> None:
    spool = Spool(io.BytesIO())
    with pytest.raises(pr.InvalidInput, match=says):
        spool.finish(data)
