"""connect_upstream: a host's one call to reach an upstream, directly or through a relay.

The relay here is a real TLS server on loopback speaking the agent's protocol (TLS 1.3,
client certificates required, one line, an answer line, then bytes); certificates are
made for the test with ``cryptography``. The Docker agent itself is tested on real engines
(adapters/docker/tests/test_docker_agent.py).
"""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import SocketStream
from anyio.streams.tls import TLSStream
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import pando_runtime as pr

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the helper is anyio's streams: nothing differs on trio


def _pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _issue(
    name: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    usage: x509.ObjectIdentifier | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), False)
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), False)
    signer = issuer[1] if issuer else key
    return builder.sign(signer, hashes.SHA256()), key


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class Relay:
    """A relay on loopback: answers ``answer`` to each first line, then echoes upper-cased
    what it reads after sending ``greeting`` (a server that speaks first)."""

    def __init__(self, answer: str, greeting: bytes = b"") -> None:
        self.ca = _issue("test-ca", None)
        self.server = _issue("relay.test", self.ca, ExtendedKeyUsageOID.SERVER_AUTH)
        self.client = _issue("host", self.ca, ExtendedKeyUsageOID.CLIENT_AUTH)
        self.answer = answer
        self.greeting = greeting
        self.lines: list[str] = []
        self.port = 0

    def context(self, tmp: anyio.Path | str) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=_cert_pem(self.ca[0]))
        path = f"{tmp}/relay.pem"
        with open(path, "w") as file:  # noqa: PTH123 - setup, before any task
            file.write(_cert_pem(self.server[0]) + _pem(self.server[1]))
        context.load_cert_chain(path)
        return context

    def dial(self, **changes: str) -> pr.UpstreamDial:
        fields = {
            "address": f"127.0.0.1:{self.port}",
            "server_name": "relay.test",
            "ca_pem": _cert_pem(self.ca[0]),
            "client_cert_pem": _cert_pem(self.client[0]),
            "client_key_pem": _pem(self.client[1]),
            "first_line": "DIAL web 8080",
        }
        return pr.UpstreamDial(**(fields | changes))

    async def serve_one(self, tcp: SocketStream, context: ssl.SSLContext) -> None:
        try:
            stream = await TLSStream.wrap(
                tcp, server_side=True, ssl_context=context, standard_compatible=False
            )
        except (ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            return
        async with stream:
            data = b""
            while b"\n" not in data:
                data += await stream.receive()
            line, _, _ = data.partition(b"\n")
            self.lines.append(line.decode())
            await stream.send(self.answer.encode() + b"\n" + self.greeting)
            if self.answer != "OK":
                return
            try:
                while chunk := await stream.receive():
                    await stream.send(chunk.upper())
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return


@pytest.fixture
async def relay_factory(tmp_path) -> AsyncIterator:
    async with anyio.create_task_group() as group:

        async def start(answer: str = "OK", greeting: bytes = b"") -> Relay:
            relay = Relay(answer, greeting)
            context = relay.context(str(tmp_path))
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
            relay.port = listener.extra(  # noqa: S610 - anyio, not Django
                anyio.abc.SocketAttribute.local_port
            )
            group.start_soon(listener.serve, lambda s: relay.serve_one(s, context))
            return relay

        yield start
        group.cancel_scope.cancel()


async def test_through_the_relay_bytes_flow_after_ok(relay_factory) -> None:
    relay = await relay_factory(greeting=b"hello ")
    upstream = pr.Upstream(url="http://web:8080", pool_key="k", dial=relay.dial())
    async with await pr.connect_upstream(upstream) as stream:
        # What the relay sent right after its OK line is the upstream's first bytes.
        assert await stream.receive() == b"hello "
        await stream.send(b"ping")
        assert await stream.receive() == b"PING"
    assert relay.lines == ["DIAL web 8080"]


async def test_a_refusal_is_connection_refused_with_the_reason(relay_factory) -> None:
    relay = await relay_factory(answer="NO 203.0.113.10 is outside the app pool")
    upstream = pr.Upstream(url="http://x:80", pool_key="k", dial=relay.dial())
    with pytest.raises(ConnectionRefusedError, match="outside the app pool"):
        await pr.connect_upstream(upstream)


async def test_a_relay_whose_certificate_is_not_trusted_is_refused(relay_factory) -> None:
    relay = await relay_factory()
    other = _issue("another-ca", None)
    for dial in (
        relay.dial(ca_pem=_cert_pem(other[0])),  # another authority
        relay.dial(server_name="elsewhere.test"),  # the right authority, another name
    ):
        with pytest.raises(ssl.SSLCertVerificationError):
            await pr.connect_upstream(pr.Upstream(url="http://x:80", pool_key="k", dial=dial))
    assert relay.lines == []


async def test_without_dial_it_is_a_tcp_connection_to_the_url() -> None:
    async def answer(stream: SocketStream) -> None:
        async with stream:
            await stream.send(b"direct")

    async with anyio.create_task_group() as group:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)  # noqa: S610
        group.start_soon(listener.serve, answer)
        upstream = pr.Upstream(url=f"http://127.0.0.1:{port}", pool_key="k")
        async with await pr.connect_upstream(upstream) as stream:
            assert await stream.receive() == b"direct"
        group.cancel_scope.cancel()


def test_the_client_key_is_out_of_repr_and_json_keeps_the_dial() -> None:
    relay = Relay("OK")
    dial = relay.dial()
    upstream = pr.Upstream(url="http://web:8080", pool_key="k", dial=dial)
    assert "PRIVATE KEY" not in repr(upstream)
    assert "client_key_pem" not in repr(upstream)
    assert pr.from_json(pr.to_json(upstream), pr.Upstream) == upstream
    # An upstream written before 1.4 (no dial) still reads.
    assert pr.from_json('{"url": "http://w:80", "pool_key": "k"}', pr.Upstream).dial is None
