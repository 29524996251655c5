"""The tests' image registry (CNCF Distribution on loopback) and the harness's push client.

The image is built here: a one-layer OCI image layout written with tarfile, hashlib and json,
and the same image as a ``docker save`` archive.
"""

from __future__ import annotations

import hashlib
import io
import json
import ssl
import tarfile

import pytest
from localcluster.registry import LocalRegistry, RegistryClient, RegistryError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _image(text: bytes) -> tuple[bytes, bytes, bytes]:
    """A layer holding ``hello.txt``, its configuration and an OCI manifest of both."""
    layer = _tar({"hello.txt": text})
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["cat", "/hello.txt"]},
            "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _sha(layer),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    return layer, config, manifest


def oci_layout(text: bytes = b"hello\n") -> tuple[bytes, str]:
    """A one-layer OCI image layout tar and its manifest's digest."""
    layer, config, manifest = _image(text)
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": _sha(manifest), "size": len(manifest)}],
    }
    files = {
        "oci-layout": b'{"imageLayoutVersion": "1.0.0"}',
        "index.json": json.dumps(index).encode(),
    }
    for blob in (layer, config, manifest):
        files[f"blobs/sha256/{_sha(blob)[7:]}"] = blob
    return _tar(files), _sha(manifest)


def docker_archive(text: bytes = b"hello\n") -> bytes:
    """The same image as ``docker save`` writes it (legacy layout: ``<id>/layer.tar``)."""
    layer, config, _ = _image(text)
    entry = {"Config": "config.json", "RepoTags": ["hello:1"], "Layers": ["abc/layer.tar"]}
    return _tar(
        {
            "manifest.json": json.dumps([entry]).encode(),
            "config.json": config,
            "abc/layer.tar": layer,
        }
    )


def test_push_then_head_with_and_without_credentials(image_registry: LocalRegistry) -> None:
    archive, digest = oci_layout()
    pushed = image_registry.push(archive, "tests/hello", "1")
    assert pushed.digest == digest
    assert pushed.by_digest == f"{image_registry.address}/tests/hello@{digest}"
    assert pushed.by_tag == f"{image_registry.address}/tests/hello:1"

    client = image_registry.client()
    assert client.manifest_status("tests/hello", digest) == 200
    assert client.manifest_status("tests/hello", "1") == 200
    assert client.manifest_status("tests/hello", "2") == 404
    assert client.manifest(("tests/hello"), digest)[0] == OCI_MANIFEST

    assert image_registry.client(auth=False).manifest_status("tests/hello", digest) == 401
    wrong = image_registry.client(password=image_registry.password + "x")
    assert wrong.manifest_status("tests/hello", digest) == 401


def test_a_second_push_sends_no_blob_again(image_registry: LocalRegistry) -> None:
    archive, digest = oci_layout(b"twice\n")
    first = image_registry.client()
    first.push(archive, "tests/twice")
    again = image_registry.client()
    assert again.push(archive, "tests/twice", "again").digest == digest
    # Two blob HEADs (layer and config), both present, and the manifest PUT.
    assert again.requests == 3
    assert first.requests == 2 * 3 + 1


def test_a_docker_archive_is_pushed_as_an_oci_manifest(image_registry: LocalRegistry) -> None:
    pushed = image_registry.push(docker_archive(b"docker\n"), "tests/docker", "1")
    assert pushed.media_type == OCI_MANIFEST
    media_type, data = image_registry.client().manifest("tests/docker", pushed.digest)
    assert media_type == OCI_MANIFEST
    assert _sha(data) == pushed.digest
    layer, config, _ = _image(b"docker\n")
    manifest = json.loads(data)
    assert manifest["config"]["digest"] == _sha(config)
    assert [x["digest"] for x in manifest["layers"]] == [_sha(layer)]


def test_tls_is_verified_against_the_registry_ca(image_registry: LocalRegistry) -> None:
    stranger = RegistryClient(image_registry.address, ssl.create_default_context())
    with pytest.raises(RegistryError, match="CERTIFICATE_VERIFY_FAILED"):
        stranger.ping()
    assert image_registry.client().ping() == 200


def test_the_password_is_in_a_private_file(image_registry: LocalRegistry) -> None:
    assert image_registry.password_file.read_text() == image_registry.password + "\n"
    assert image_registry.password_file.stat().st_mode & 0o077 == 0
    assert image_registry.password not in repr(image_registry)
    assert image_registry.password not in repr(image_registry.client())


def test_a_restart_keeps_port_storage_and_password(tmp_path) -> None:
    archive, digest = oci_layout(b"restart\n")
    with LocalRegistry(tmp_path / "registry") as registry:
        registry.push(archive, "tests/restart")
        address = registry.address
        registry.stop(keep=True)
        assert not registry.running()
        with pytest.raises(RegistryError):
            registry.client().ping()
        registry.start()
        assert registry.address == address
        assert registry.client().manifest_status("tests/restart", digest) == 200
    assert not registry.running()


def test_what_a_node_and_the_adapter_need(image_registry: LocalRegistry) -> None:
    hosts = image_registry.hosts_toml()
    assert f'server = "https://{image_registry.address}"' in hosts
    assert f'ca = "{image_registry.ca_cert}"' in hosts
    settings = image_registry.adapter_settings()
    assert settings["image_registry"] == image_registry.address
    assert image_registry.password not in json.dumps(settings)
