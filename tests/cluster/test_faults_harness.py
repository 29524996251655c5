"""The harness's faults: restart and pause components, and Toxiproxy in front of the API server.

These tests kill and stop components, so they run a control plane of their own, never the
session's shared one.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from localcluster import (
    LocalCluster,
    ProxiedApiServer,
    ToxiproxyServer,
    proxy_apiserver,
)
from localcluster.rest import Rest

pytestmark = pytest.mark.kube


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def proxied(own_cluster: LocalCluster) -> Iterator[ProxiedApiServer]:
    with ToxiproxyServer() as server:
        yield proxy_apiserver(own_cluster, server)


def _rest_through(kubeconfig: Path, work_dir: Path) -> Rest:
    """A client of the kubeconfig's server with its CA and identity (the certificate verified)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    import base64  # noqa: PLC0415

    cluster = doc["clusters"][0]["cluster"]
    user = doc["users"][0]["user"]
    files = {}
    for key in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
        source = cluster if key.startswith("certificate-authority") else user
        path = work_dir / f"{kubeconfig.stem}-{key}.pem"
        path.write_bytes(base64.b64decode(source[key]))
        files[key] = path
    return Rest(
        cluster["server"],
        files["certificate-authority-data"],
        files["client-certificate-data"],
        files["client-key-data"],
    )


def test_restarted_api_server_keeps_its_data(own_cluster: LocalCluster) -> None:
    name = f"keep-{time.monotonic_ns()}"
    status, _ = own_cluster.rest.post("/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201
    seconds = own_cluster.restart("kube-apiserver")
    assert seconds > 0
    assert own_cluster.rest.get(f"/api/v1/namespaces/{name}")[0] == 200


def test_restarted_etcd_and_kwok_come_back(own_cluster: LocalCluster) -> None:
    own_cluster.restart("etcd", down_for=0.5)
    own_cluster.wait_healthy("kube-apiserver")
    own_cluster.restart("kwok", crash=False)
    assert own_cluster.healthy("kwok")


def test_paused_api_server_hangs_then_answers(own_cluster: LocalCluster) -> None:
    with own_cluster.paused("kube-apiserver"):
        status, answer = own_cluster.rest.request("GET", "/readyz", timeout=1.0)
        assert status == 0, answer  # no answer at all: a hang, not a refusal
        assert not own_cluster.healthy("kube-apiserver")
    own_cluster.wait_healthy("kube-apiserver", timeout=120)  # a loaded machine resumes it slowly


def test_proxy_verifies_the_api_servers_certificate(
    own_cluster: LocalCluster, proxied: ProxiedApiServer
) -> None:
    rest = _rest_through(proxied.kubeconfig, own_cluster.work_dir)
    assert rest.port == proxied.proxy.port
    assert rest.get("/api/v1/namespaces/default")[0] == 200
    # The same address with a CA that did not sign the server's certificate is refused.
    context = ssl.create_default_context()  # the system's CAs only
    with (
        socket.create_connection(("127.0.0.1", proxied.proxy.port), timeout=5) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_proxy_faults(own_cluster: LocalCluster, proxied: ProxiedApiServer) -> None:
    rest = _rest_through(proxied.restricted_kubeconfig, own_cluster.work_dir)
    toxiproxy, name = proxied.toxiproxy, proxied.proxy.name
    assert rest.get("/version")[0] == 200
    with toxiproxy.disabled(name):
        status, answer = rest.request("GET", "/version", timeout=2)
        assert status == 0
        assert "refused" in str(answer).lower()
    with toxiproxy.toxic(name, "timeout", timeout=0):
        status, answer = rest.request("GET", "/version", timeout=1)
        assert status == 0
        assert "timed out" in str(answer).lower()
    with toxiproxy.toxic(name, "reset_peer", timeout=0):
        status, answer = rest.request("GET", "/version", timeout=2)
        assert status == 0
    assert toxiproxy.toxics(name) == []
    assert rest.get("/version")[0] == 200
