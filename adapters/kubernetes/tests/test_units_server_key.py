"""The key of a warm start's store: what a kubeconfig says of its server, read without the client.

Real files in ``tmp_path``; the key read from the kubeconfig alone must be the key of the
configuration the client loads from it, and tell other servers and other CAs apart.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from fresh_imports import modules_after
from pando_runtime_kubernetes import IN_CLUSTER, Cluster
from pando_runtime_kubernetes.api._server_key import (
    ServerKey,
    key_from_configuration,
    key_from_kubeconfig,
)

CA_A = b"-----BEGIN CERTIFICATE-----\nQUFBQUFB\nQkJCQkJC\n-----END CERTIFICATE-----\n"
CA_B = b"-----BEGIN CERTIFICATE-----\nQ0NDQ0ND\n-----END CERTIFICATE-----\n"
SERVER = "https://127.0.0.1:6443"


def _kubeconfig(path: Path, **cluster: Any) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "dev",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def _both(path: Path) -> tuple[ServerKey | None, ServerKey]:
    """The key from the files alone, and the key of the configuration the client loads."""
    loaded = Cluster.load(path)
    return key_from_kubeconfig(path, None, environ={}), key_from_configuration(
        loaded.name, loaded.configuration
    )


def test_the_kubeconfig_alone_gives_the_key_of_what_the_client_loads(tmp_path: Path) -> None:
    data = base64.b64encode(CA_A).decode()
    from_data = _kubeconfig(
        tmp_path / "a", server=f"{SERVER}/", **{"certificate-authority-data": data}
    )
    (tmp_path / "b" / "pki").mkdir(parents=True)
    # The same CA as a file named relative to the kubeconfig, with other line ends.
    (tmp_path / "b" / "pki" / "ca.crt").write_bytes(CA_A.replace(b"\n", b"\r\n"))
    from_file = _kubeconfig(
        tmp_path / "b" / "config", server=SERVER, **{"certificate-authority": "pki/ca.crt"}
    )
    keys = {*_both(from_data), *_both(from_file)}
    assert len(keys) == 1, keys
    (key,) = keys
    assert key is not None
    assert key.cluster == "dev"
    assert key.server == SERVER
    assert key.ca.startswith("sha256:")


def test_another_server_or_another_ca_is_another_key(tmp_path: Path) -> None:
    def key(name: str, **cluster: Any) -> ServerKey | None:
        return key_from_kubeconfig(_kubeconfig(tmp_path / name, **cluster), None, environ={})

    def data(ca: bytes) -> dict[str, str]:
        return {"certificate-authority-data": base64.b64encode(ca).decode()}

    keys = [
        key("a", server=SERVER, **data(CA_A)),
        key("other-server", server="https://127.0.0.2:6443", **data(CA_A)),
        key("other-ca", server=SERVER, **data(CA_B)),
        key("a-bundle", server=SERVER, **data(CA_A + CA_B)),
        key("system", server=SERVER),
        key("insecure", server=SERVER, **{"insecure-skip-tls-verify": True}),
        key("http", server="http://127.0.0.1:8080"),
    ]
    assert None not in keys
    assert len({(k.server, k.ca) for k in keys if k is not None}) == len(keys)
    assert [k.ca for k in keys[-3:] if k is not None] == ["system", "insecure", "none"]


def test_what_cannot_be_told_from_the_files_is_no_key(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", server=SERVER, **{"certificate-authority": "gone.crt"})
    assert key_from_kubeconfig(path, None, environ={}) is None  # its CA cannot be read
    assert key_from_kubeconfig(path, "no-such-context", environ={}) is None
    assert key_from_kubeconfig(tmp_path / "missing", None, environ={}) is None


def test_in_cluster_is_keyed_by_the_pods_service_address_and_ca(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_bytes(CA_A)
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    key = key_from_kubeconfig(None, None, environ=environ, service_account_dir=tmp_path)
    loaded = Cluster.load(in_cluster=True, environ=environ, service_account_dir=tmp_path)
    assert key == key_from_configuration(IN_CLUSTER, loaded.configuration)
    assert key is not None
    assert key.server == "https://10.96.0.1:443"


def test_reading_the_key_imports_none_of_the_client(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", server=SERVER)
    loaded = modules_after(
        f"""
        from pando_runtime_kubernetes.api._server_key import key_from_kubeconfig
        assert key_from_kubeconfig({str(path)!r}, None) is not None
        """
    )
    assert "yaml" in loaded, "the kubeconfig was read"
    assert not {m for m in loaded if m.split(".")[0] == "kubernetes"}
