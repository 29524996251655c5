"""The edge's create request, pure: what the spec hash covers, what labels never hold."""

from __future__ import annotations

import attrs
from pando_runtime_docker.manifests import CERT_DIR, EdgeNames, LogCap, Naming, edge_request

import pando_runtime as pr

NAMES = EdgeNames(Naming(owner="pando"))
CAP = LogCap(max_bytes=1024 * 1024, files=2)

PLAN = pr.EdgePlan(
    name="front",
    image="proxy:1",
    env={"TOKEN": "a-secret-value"},
    ports=(pr.EdgePort(published=443, target=8443),),
    mounts=(pr.EdgeMount(path="/data", volume_id="certs"),),
    certificates=(
        pr.EdgeCertificate(name="site", cert_pem="-----BEGIN C-----", key_pem="-----BEGIN K-----"),
    ),
)


def test_the_edge_publishes_its_ports_and_labels_no_secret() -> None:
    request = edge_request(PLAN, NAMES, log_cap=CAP, stop_timeout=2)
    assert request.name == "pando_edge.front"
    host = request.body["HostConfig"]
    assert host["PortBindings"] == {"8443/tcp": [{"HostPort": "443"}]}
    assert host["NetworkMode"] == "pando_edge"
    labels = request.body["Labels"]
    assert labels["io.pando.edge-owner"] == "pando"
    assert labels["io.pando.edge-volumes"] == "certs"
    assert "a-secret-value" not in str(labels)
    assert "io.pando.owner" not in labels  # never a workload in the view
    key = next(f for f in request.files if f.path == f"{CERT_DIR}/site.key")
    assert key.mode == 0o600


def test_the_spec_hash_follows_the_plan_and_its_certificates() -> None:
    spec = edge_request(PLAN, NAMES, log_cap=CAP, stop_timeout=2).spec
    assert spec == edge_request(PLAN, NAMES, log_cap=CAP, stop_timeout=2).spec
    other_env = attrs.evolve(PLAN, env={"TOKEN": "other"})
    other_key = attrs.evolve(
        PLAN,
        certificates=(
            pr.EdgeCertificate(name="site", cert_pem="-----BEGIN C-----", key_pem="-----BEGIN 2"),
        ),
    )
    for changed in (other_env, other_key):
        assert edge_request(changed, NAMES, log_cap=CAP, stop_timeout=2).spec != spec
