"""The agent's pure parts, without an engine: its authority and certificates, its settings,
its container's create request and files, and where the authority is kept."""

from __future__ import annotations

import datetime as dt
import io
import stat
import tarfile
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.features import AgentService, AgentSettings
from pando_runtime_docker.manifests import (
    AGENT_DIR,
    AgentNames,
    Authority,
    Naming,
    agent_files,
    agent_request,
)

import pando_runtime as pr

NAMING = Naming(owner="pando")
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def cert(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def test_the_authority_is_a_p256_ca_of_ten_years_that_reads_back() -> None:
    authority = Authority.generate("pando", NOW)
    assert isinstance(authority.key.curve, ec.SECP256R1)
    assert authority.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert authority.cert.not_valid_after_utc - NOW == dt.timedelta(days=3650)
    again = Authority.from_pem(authority.to_pem())
    assert again.cert == authority.cert
    assert "PRIVATE" not in repr(authority)


def test_the_agents_certificate_serves_its_address_and_the_hosts_is_a_clients() -> None:
    authority = Authority.generate("pando", NOW)
    for address, kind in (("198.19.80.2", x509.IPAddress), ("engine-1.example", x509.DNSName)):
        issued = authority.issue_agent(address, NOW)
        leaf = cert(issued.cert_pem)
        leaf.verify_directly_issued_by(authority.cert)
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(n) for n in names.get_values_for_type(kind)] == [address]
        usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
        assert leaf.not_valid_after_utc - NOW == dt.timedelta(days=90)
        assert issued.renew_at - NOW == dt.timedelta(days=30)
        assert "PRIVATE" not in repr(issued)
    host = cert(authority.issue_host("pando", NOW).cert_pem)
    host.verify_directly_issued_by(authority.cert)
    usage = host.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_a_bad_authority_is_refused_without_quoting_its_key() -> None:
    authority, other = Authority.generate("a"), Authority.generate("b")
    leaf = authority.issue_host("a")
    key_of_other = other.to_pem().split("-----END CERTIFICATE-----\n")[1]
    cases = {
        authority.cert_pem: "no unencrypted private key",
        authority.cert_pem + key_of_other: "not the certificate's",
        leaf.cert_pem + leaf.key_pem: "not a CA's",
        "garbage": "not PEM certificates",
    }
    for text, reason in cases.items():
        with pytest.raises(ValueError, match=reason) as caught:
            Authority.from_pem(text)
        assert "PRIVATE KEY" not in str(caught.value)


def test_agent_settings_are_checked_all_at_once_with_their_paths() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        DockerAdapter({"upstream_mode": "agent", "agent_ca": "-----BEGIN nonsense"})
    paths = {p.path for p in caught.value.problems}
    assert paths == {"agent_image", "agent_address", "agent_ca"}
    leaf = Authority.generate("x").issue_host("x")
    secret = leaf.cert_pem + leaf.key_pem
    with pytest.raises(pr.InvalidConfig) as caught:
        DockerAdapter(
            {
                "upstream_mode": "agent",
                "agent_image": "pando.test/agent:1",
                "agent_address": "tcp://engine:2376",
                "agent_ca": secret,
                "agent_trusted_cas": "not a certificate",
            }
        )
    problems = {p.path: p.message for p in caught.value.problems}
    assert set(problems) == {"agent_address", "agent_ca", "agent_trusted_cas"}
    assert "PRIVATE KEY" not in str(caught.value) + repr(caught.value.problems)
    good = DockerAdapter(
        {
            "upstream_mode": "agent",
            "agent_image": "pando.test/agent:1",
            "agent_address": "engine-1.example",
            "agent_ca": Authority.generate("x").to_pem(),
        }
    )
    assert "PRIVATE KEY" not in repr(good.config)


def test_upstream_needs_the_adapter_open_in_agent_mode() -> None:
    adapter = DockerAdapter(
        {"upstream_mode": "agent", "agent_image": "i", "agent_address": "198.19.80.2"}
    )
    with pytest.raises(pr.AdapterFailed, match="while the adapter is open"):
        adapter.upstream(pr.WorkloadRef("shop", "web"), 8080)


def test_the_agents_container_is_locked_down_with_one_port_and_no_secret() -> None:
    names = AgentNames(NAMING)
    request = agent_request(names, image="img", pool="10.231.0.0/16", published_port=7443)
    body, host = request.body, request.body["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert "CapAdd" not in host
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert list(host["PortBindings"]) == ["7443/tcp"]
    assert host["Memory"] == host["MemorySwap"]
    assert host["PidsLimit"]
    assert host["NanoCpus"]
    assert host["NetworkMode"] == "pando-agent"
    assert body["User"] == "65534:65534"
    assert body["Volumes"] == {AGENT_DIR: {}}
    assert body["Cmd"][body["Cmd"].index("-pool") + 1] == "10.231.0.0/16"
    assert "Env" not in body
    assert body["Labels"] == {"io.pando.agent-owner": "pando", "io.pando.spec": request.spec}
    others = [
        agent_request(names, image="other", pool="10.231.0.0/16", published_port=7443),
        agent_request(names, image="img", pool="10.232.0.0/16", published_port=7443),
        agent_request(names, image="img", pool="10.231.0.0/16", published_port=7444),
    ]
    assert len({request.spec, *(o.spec for o in others)}) == 4


def test_the_agents_network_sorts_before_every_bundle_network() -> None:
    # Docker routes a container with several networks through the first by name, and its
    # published port follows: the agent's own network must stay first.
    names = AgentNames(NAMING)
    for bundle_id in ("0", "a", "a-b", "zz", "-"):
        assert names.network < NAMING.network_name(bundle_id)
    assert names.container not in {NAMING.container_name("agent", "x"), names.network}


def test_the_agents_files_give_the_key_to_the_agent_alone() -> None:
    archive = agent_files("CERT\n", "KEY\n", "CAS\n")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        contents = {name: tar.extractfile(m).read() for name, m in members.items()}  # type: ignore[union-attr]
    assert contents == {"agent.pem": b"CERT\nKEY\n", "clients.pem": b"CAS\n"}
    assert members["agent.pem"].mode == 0o400
    assert {(m.uid, m.gid) for m in members.values()} == {(65534, 65534)}


def service(ca_file: Path, owner: str = "pando") -> AgentService:
    settings = AgentSettings(
        image="img",
        address="198.19.80.2",
        port=7443,
        pool="10.231.0.0/16",
        ca_pem=None,
        ca_file=ca_file,
        trusted_pem=None,
    )
    return AgentService(None, None, AgentNames(Naming(owner=owner)), settings)  # type: ignore[arg-type]


def test_the_default_authority_is_made_once_and_read_by_every_later_adapter(
    tmp_path: Path,
) -> None:
    ca_file = tmp_path / "state" / "pando-ca.pem"
    first = service(ca_file).load_authority()
    assert stat.S_IMODE(ca_file.stat().st_mode) == 0o600
    assert service(ca_file).load_authority().cert == first.cert  # a restart, a replica
    dial = service(ca_file).dial("pando.shop.web", 8080)
    assert dial.first_line == "DIAL pando.shop.web 8080"
    assert (dial.address, dial.server_name) == ("198.19.80.2:7443", "198.19.80.2")
    cert(dial.client_cert_pem).verify_directly_issued_by(first.cert)
    assert "PRIVATE KEY" not in repr(pr.Upstream(url="http://x:1", pool_key="k", dial=dial))
    ca_file.write_text("broken")
    with pytest.raises(pr.InvalidConfig) as caught:
        service(ca_file).load_authority()
    assert [p.path for p in caught.value.problems] == ["agent_ca_file"]
    assert ca_file.read_text() == "broken"  # nothing written over it
