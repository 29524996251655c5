"""Reaching a remote engine, without one: which engine the settings and Docker's environment
name, what is refused before anything is contacted, and the failures a real dockerd cannot
show, against real servers on loopback (a TLS server whose certificate expired or is not valid
yet, an HTTP server that is not an engine, a plain one where TLS was expected).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _docker_tests import write_context
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.tls import TLSStream
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

pki = pytest.importorskip("localcluster.pki")

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A CA; a server certificate of it that expired, one not valid yet; a client's."""
    folder = tmp_path_factory.mktemp("certs")
    ca = pki.make_ca(folder, "ca")
    server = {"subject": "/CN=engine", "usage": "serverAuth", "sans": ("IP:127.0.0.1",)}
    made = {
        "ca": ca,
        "expired": pki.issue_leaf(folder, ca, "expired", days=-1, **server),
        "future": pki.issue_dated_leaf(
            folder,
            ca,
            "future",
            not_before="20990101000000Z",
            not_after="21000101000000Z",
            **server,
        ),
        "client": pki.issue_leaf(folder, ca, "client", subject="/CN=c", usage="clientAuth"),
    }
    for pair in made.values():
        pair.key.chmod(0o600)
    return made


@pytest.fixture
def no_docker_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """None of Docker's variables set, and an empty Docker configuration folder."""
    for name in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DOCKER_TLS", raising=False)
    folder = tmp_path / "docker-config"
    folder.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    return folder


def problems(config: dict[str, Any]) -> dict[str, str]:
    """Each refused setting's messages (joined), as ``InvalidConfig`` lists them."""
    with pytest.raises(pr.InvalidConfig) as caught:
        DockerAdapter(config)
    found: dict[str, str] = {}
    for problem in caught.value.problems:
        found[problem.path] = f"{found.get(problem.path, '')} {problem.message}".strip()
    return found


# -- which engine ------------------------------------------------------------------------------


def test_the_engine_is_chosen_in_the_docker_clis_order(
    no_docker_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = no_docker_env
    write_context(folder, "from-env", "unix:///env.sock")
    write_context(folder, "current", "unix:///current.sock")

    def engine(config: dict[str, Any] | None = None) -> tuple[str, str]:
        endpoint = DockerAdapter(config or {}).endpoint
        return endpoint.host, endpoint.origin

    assert engine() == ("unix:///var/run/docker.sock", "the default")
    (folder / "config.json").write_text(json.dumps({"currentContext": "current"}))
    assert engine() == ("unix:///current.sock", "context 'current'")
    monkeypatch.setenv("DOCKER_CONTEXT", "from-env")
    assert engine() == ("unix:///env.sock", "context 'from-env'")
    monkeypatch.setenv("DOCKER_HOST", "unix:///host.sock")
    assert engine() == ("unix:///host.sock", "DOCKER_HOST")
    assert engine({"context": "current"}) == ("unix:///current.sock", "context 'current'")
    assert engine({"host": "unix:///set.sock"}) == ("unix:///set.sock", "the host setting")
    monkeypatch.delenv("DOCKER_HOST")
    monkeypatch.setenv("DOCKER_CONTEXT", "default")  # the CLI's built-in context
    assert engine() == ("unix:///var/run/docker.sock", "context 'default'")


def test_host_with_context_and_an_unknown_context_are_refused(no_docker_env: Path) -> None:
    write_context(no_docker_env, "prod-1", "unix:///prod.sock")
    both = problems({"host": "unix:///a.sock", "context": "prod-1"})
    assert "not both" in both["context"]
    unknown = problems({"context": "prod-2"})
    assert "no Docker context named 'prod-2'" in unknown["context"]
    assert "known: prod-1" in unknown["context"]


def test_plain_tcp_is_refused_unless_loopback_or_allowed(no_docker_env: Path) -> None:
    refused = problems({"host": "tcp://10.0.0.5:2375"})
    assert "plain HTTP" in refused["host"]
    assert "allow_plain_tcp" in refused["host"]
    for loopback in ("tcp://127.0.0.1:2375", "tcp://localhost:2375", "tcp://[::1]:2375"):
        assert DockerAdapter({"host": loopback}).endpoint.tls is None
    allowed = DockerAdapter({"host": "tcp://10.0.0.5", "allow_plain_tcp": True}).endpoint
    assert allowed.address == "10.0.0.5:2375"


def test_the_server_is_verified_whatever_docker_tls_verify_says(
    no_docker_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    certs: dict[str, Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Docker's Go client and docker-py skip the check when DOCKER_TLS_VERIFY is unset.
    cert_path = tmp_path / "certs"
    cert_path.mkdir()
    for name, source in (
        ("ca.pem", certs["ca"].cert),
        ("cert.pem", certs["client"].cert),
        ("key.pem", certs["client"].key),
    ):
        (cert_path / name).write_bytes(source.read_bytes())
    (cert_path / "key.pem").chmod(0o600)
    monkeypatch.setenv("DOCKER_HOST", "tcp://engine.example:2376")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(cert_path))
    for verify in (None, "", "0", "1"):
        if verify is None:
            monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
        else:
            monkeypatch.setenv("DOCKER_TLS_VERIFY", verify)
        tls = DockerAdapter().endpoint.tls
        assert tls is not None
        assert tls.context.verify_mode == ssl.CERT_REQUIRED
        assert tls.context.check_hostname
        assert tls.client_valid is not None  # the client certificate is presented
    with caplog.at_level(logging.WARNING, "pando_runtime.docker"):
        skipped = DockerAdapter({"tls_skip_verify": True}).endpoint.tls
    assert skipped is not None
    assert skipped.context.verify_mode == ssl.CERT_NONE
    assert "not verified" in caplog.text
    write_context(no_docker_env, "lax", "tcp://engine.example:2376", skip_verify=True)
    lax = DockerAdapter({"context": "lax"}).endpoint.tls
    assert lax is not None
    assert lax.context.verify_mode == ssl.CERT_NONE  # the context's SkipTLSVerify says so


def test_private_keys_others_can_read_are_refused(
    no_docker_env: Path, certs: dict[str, Any], tmp_path: Path
) -> None:
    loose = tmp_path / "loose.key"
    loose.write_bytes(certs["client"].key.read_bytes())
    loose.chmod(0o644)
    tls = problems(
        {"host": "tcp://engine.example:2376", "tls_cert": str(certs["client"].cert),
         "tls_key": str(loose)}
    )  # fmt: skip
    assert "chmod 600" in tls["tls_key"]
    ssh = problems({"host": "ssh://root@engine.example", "ssh_identity": str(loose)})
    assert "chmod 600" in ssh["ssh_identity"]


def test_bad_ssh_settings_are_refused_all_at_once_each_at_its_path(no_docker_env: Path) -> None:
    found = problems(
        {
            "host": "ssh://root:secret@engine.example/var/run",
            "ssh_host_key": "ssh-ed25519 not-base64!",
            "ssh_socket": "docker.sock",
            "ssh_known_hosts": "/nowhere/known_hosts",
            "tls_ca": "/etc/ca.pem",
        }
    )
    assert set(found) == {"host", "ssh_host_key", "ssh_socket", "ssh_known_hosts", "tls_ca"}
    assert "password" in found["host"]
    assert "no path" in found["host"]
    assert "line 1" in found["ssh_host_key"]
    assert "does not apply" in found["tls_ca"]


# -- PEM text ----------------------------------------------------------------------------------


def test_pem_text_is_loaded_and_the_key_is_never_shown(
    no_docker_env: Path, certs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    key = certs["client"].key.read_text()
    secret_line = key.splitlines()[1]
    config = {
        "host": "tcp://engine.example:2376",
        "tls_ca_pem": certs["ca"].cert.read_text(),
        "tls_cert_pem": certs["client"].cert.read_text(),
        "tls_key_pem": key,
    }
    adapter = DockerAdapter(config)
    assert adapter.endpoint.tls is not None
    assert adapter.endpoint.tls.client_valid is not None
    assert secret_line not in repr(adapter.config)
    other_key = certs["expired"].key.read_text()  # a key that is not the certificate's
    with caplog.at_level(logging.DEBUG), pytest.raises(pr.InvalidConfig) as caught:
        DockerAdapter({**config, "tls_key_pem": other_key})
    assert "does not match" in caught.value.message
    shown = json.dumps(caught.value.to_dict()) + str(caught.value) + caplog.text
    assert other_key.splitlines()[1] not in shown


async def test_a_key_given_as_text_lives_in_a_private_folder_until_the_adapter_closes(
    no_docker_env: Path, tmp_path: Path
) -> None:
    from localdocker.sshd import make_key  # noqa: PLC0415 - only with the harness

    make_key(tmp_path / "id", "test")
    host_key = make_key(tmp_path / "host", "host")
    with socket.socket() as bound:  # bound, never listening: ssh's connection is refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
    adapter = DockerAdapter(
        {
            "host": f"ssh://root@127.0.0.1:{port}",
            "ssh_host_key": host_key,
            "ssh_identity_pem": (tmp_path / "id").read_text(),
        }
    )
    with pytest.raises(pr.AdapterUnavailable) as caught:
        await adapter.health_check()
    assert caught.value.details["reason"] == "ssh_connection_failed"
    tunnel = adapter.transport.link.tunnel
    assert tunnel is not None
    folder = Path(tunnel.socket_path).parent
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (folder / "identity").stat().st_mode & 0o777 == 0o600
    await adapter.aclose()
    assert not folder.exists()


# -- real servers that are not a good engine ---------------------------------------------------

Handler = Callable[[SocketStream], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[int]:
    """A server on a free loopback port for the block, each connection to ``handler``."""
    multi = await anyio.create_tcp_listener(local_host="127.0.0.1")
    listener = multi.listeners[0]
    port = int(listener.extra(SocketAttribute.local_port))  # noqa: S610 - anyio's, not Django's

    async def one(stream: SocketStream) -> None:
        with contextlib.suppress(Exception):
            async with stream:
                await handler(stream)

    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, one, group)
        try:
            yield port
        finally:
            group.cancel_scope.cancel()


def answering(response: bytes) -> Handler:
    async def handle(stream: Any) -> None:
        await stream.receive()
        await stream.send(response)

    return handle


def tls_serving(cert: Any) -> Handler:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert.cert, cert.key)

    async def handle(stream: SocketStream) -> None:
        secured = await TLSStream.wrap(stream, server_side=True, ssl_context=context)
        await answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")(secured)

    return handle


@pytest.mark.parametrize(
    ("which", "reason"),
    [("expired", "certificate_expired"), ("future", "certificate_not_yet_valid")],
)
async def test_a_server_certificate_out_of_its_dates_is_refused_with_its_reason(
    no_docker_env: Path, certs: dict[str, Any], which: str, reason: str
) -> None:
    # On both backends: the handshake's error reaches the adapter through each one's stream.
    async with serving(tls_serving(certs[which])) as port:
        adapter = DockerAdapter(
            {"host": f"tcp://127.0.0.1:{port}", "tls_ca": str(certs["ca"].cert)}
        )
        with pytest.raises(pr.AdapterUnavailable) as caught:
            await adapter.health_check()
        await adapter.aclose()
    assert caught.value.details["reason"] == reason


async def test_tls_to_a_server_that_does_not_speak_it_says_so(
    no_docker_env: Path, certs: dict[str, Any]
) -> None:
    plain = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
    async with serving(answering(plain)) as port:
        adapter = DockerAdapter(
            {"host": f"tcp://127.0.0.1:{port}", "tls_ca": str(certs["ca"].cert)}
        )
        with pytest.raises(pr.AdapterUnavailable) as caught:
            await adapter.health_check()
        await adapter.aclose()
    assert caught.value.details["reason"] == "not_tls"


NGINX_404 = b"HTTP/1.1 404 Not Found\r\nServer: nginx\r\nContent-Length: 9\r\n\r\nnot found"
GO_TLS_400 = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
"""What Go's TLS server (dockerd's) answers a plain HTTP request."""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(
    ("answer", "reason"), [(NGINX_404, "not_docker"), (GO_TLS_400, "tls_required")]
)
async def test_a_server_that_is_not_a_plain_docker_engine_says_what_it_is(
    no_docker_env: Path, answer: bytes, reason: str
) -> None:
    # One backend: the answer is read by the same code on both.
    async with serving(answering(answer)) as port:
        adapter = DockerAdapter({"host": f"tcp://127.0.0.1:{port}"})
        with pytest.raises(pr.AdapterUnavailable) as caught:
            await adapter.health_check()
        await adapter.aclose()
    assert caught.value.details["reason"] == reason
    assert caught.value.details["status"] in (400, 404)
