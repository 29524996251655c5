"""The agent on real engines: a host that reaches no engine's bridges dials workloads through
each engine's agent (upstream_mode 'agent').

The host is the harness's host namespace (``host_namespace``): linked to each engine's
namespace, it routes to nothing but the engine's end of its link, where the agent's port is
published. Every client here runs inside it (or inside an app's container), through
``pando_runtime.connect_upstream``. Asyncio only: the client is anyio's streams and the
adapter's calls are those every other Docker test runs on both backends.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from _docker_harness import DockerHarness
from _docker_tests import adapter_config, running, until, workload
from anyio.streams.tls import TLSAttribute, TLSStream
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.manifests import Authority

import pando_runtime as pr

pytestmark = pytest.mark.anyio

_PORTS = itertools.count(17443)
"""A published port per adapter: no test waits for another's agent to free one."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def web(page: str) -> pr.WorkloadPlan:
    script = f"mkdir -p /www && echo {page} > /www/index.html && exec httpd -f -p 8080 -h /www"
    return workload("web", command=("sh", "-c", script))


def agent_image(engine: Any) -> str:
    from localdocker import AGENT, agent_image  # noqa: PLC0415 - only with the harness

    if AGENT not in engine.api.image_names():
        engine.load_image(agent_image().archive)
    return str(AGENT)


def agent_settings(engine: Any, owner: str, address: str, ca_file: Path, **more: Any) -> dict:
    return adapter_config(
        f"unix://{engine.socket_path}",
        owner,
        upstream_mode="agent",
        agent_image=agent_image(engine),
        agent_address=address,
        agent_port=next(_PORTS),
        agent_ca_file=str(ca_file),
        **more,
    )


async def http_get(upstream: pr.Upstream) -> bytes:
    """GET / through ``upstream`` (HTTP/1.0: the server closes when done)."""
    async with await pr.connect_upstream(upstream, connect_timeout=5) as stream:
        await stream.send(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        try:
            while True:
                data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return data


def inside(host: Any, fn: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
    """Run ``fn`` in the host's namespace."""
    return anyio.to_thread.run_sync(host.run, fn)


async def served(host: Any, upstream: pr.Upstream) -> bytes:
    """The workload's answer through the agent, polled: running is not listening yet."""
    with anyio.fail_after(30):
        while True:
            try:
                return await inside(host, lambda: http_get(upstream))  # type: ignore[no-any-return]
            except ConnectionRefusedError as refused:
                if "cannot connect" not in str(refused):
                    raise
            await anyio.sleep(0.05)


@pytest.fixture
async def engine_one(
    docker_engine: Any, host_namespace: Any, owner: str, tmp_path: Path
) -> AsyncIterator[DockerAdapter]:
    """An agent-mode adapter on the first engine, its app ``shop`` serving ``one``."""
    address = host_namespace.link(docker_engine)
    settings = agent_settings(docker_engine, owner, address, tmp_path / "ca.pem")
    harness = DockerHarness(settings["host"])
    try:
        async with DockerAdapter(settings) as adapter:
            await adapter.apply(pr.BundlePlan(bundle_id="shop", workloads=(web("one"),)))
            await until(adapter, "shop", running, "the web workload")
            yield adapter
    finally:
        await harness.remove_owned(owner)


async def test_a_workload_on_each_engine_answers_through_its_agent(
    engine_one: DockerAdapter,
    second_docker_engine: Any,
    host_namespace: Any,
    owner: str,
    tmp_path: Path,
) -> None:
    address = host_namespace.link(second_docker_engine)
    other_owner = f"{owner}b"
    settings = agent_settings(second_docker_engine, other_owner, address, tmp_path / "b.pem")
    try:
        async with DockerAdapter(settings) as second:
            await second.apply(pr.BundlePlan(bundle_id="shop", workloads=(web("two"),)))
            await until(second, "shop", running, "the web workload")
            ref = pr.WorkloadRef("shop", "web")
            first_upstream, second_upstream = (
                engine_one.upstream(ref, 8080),
                second.upstream(ref, 8080),
            )
            assert b"one" in await served(host_namespace, first_upstream)
            assert b"two" in await served(host_namespace, second_upstream)
            # Control: the host has no route to the workloads themselves.
            assert "default" not in host_namespace.routes()
            for upstream in (first_upstream, second_upstream):
                direct = attrs.evolve(upstream, dial=None)
                with pytest.raises(OSError) as failed:  # noqa: PT011 - the cause says why
                    await inside(host_namespace, lambda u=direct: http_get(u))
                cause = failed.value.__cause__ or failed.value
                assert getattr(cause, "errno", None) == errno.ENETUNREACH, repr(cause)
    finally:
        await DockerHarness(settings["host"]).remove_owned(other_owner)


def inspect(engine: Any, name: str, template: str) -> str:
    return str(engine.docker("inspect", "--format", template, name).stdout.strip())


async def test_the_agent_dials_only_workloads_of_its_apps(
    engine_one: DockerAdapter, docker_engine: Any, host_namespace: Any, owner: str
) -> None:
    ref = pr.WorkloadRef("shop", "web")
    upstream = engine_one.upstream(ref, 8080)
    assert b"one" in await served(host_namespace, upstream)  # the control
    assert upstream.dial is not None
    network = engine_one.naming.network_name("shop")
    agent = f"{owner}_agent"
    gateway = inspect(
        docker_engine, agent, f'{{{{(index .NetworkSettings.Networks "{network}").Gateway}}}}'
    )
    itself = inspect(
        docker_engine, agent, f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}'
    )
    # Another owner's app on the same engine: in the pool, on no network the agent is on.
    other_owner = f"{owner}x"
    host = f"unix://{docker_engine.socket_path}"
    async with DockerAdapter(adapter_config(host, other_owner)) as other:
        try:
            await other.apply(pr.BundlePlan(bundle_id="shop", workloads=(web("other"),)))
            await until(other, "shop", running, "the other owner's workload")
            foreign = other.naming.container_name("shop", "web")
            foreign_ip = inspect(
                docker_engine, foreign, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
            )
            refused = {
                f"DIAL {gateway} 8080": "a bridge gateway",
                f"DIAL {itself} 8080": "the agent itself",
                "DIAL 203.0.113.10 80": "outside the app pool",  # the stand-in internet
                "DIAL allowed.pando.test 80": "outside the app pool",  # by its name
                "DIAL 169.254.169.254 80": "outside the app pool",  # the metadata stand-in
                f"DIAL {foreign_ip} 8080": "on no network the agent is joined to",
                f"DIAL {foreign} 8080": "does not resolve",
                "DIAL shop 8080 now": "expected 'DIAL <host> <port>'",
            }
            for line, reason in refused.items():
                asked = attrs.evolve(upstream, dial=attrs.evolve(upstream.dial, first_line=line))
                with pytest.raises(ConnectionRefusedError, match=reason):
                    await inside(host_namespace, lambda u=asked: http_get(u))
        finally:
            await DockerHarness(host).remove_owned(other_owner)


async def raw_tls(dial: pr.UpstreamDial, *, with_certificate: bool) -> bytes:
    """What a TLS client gets after its first line: with the host's certificate or none."""
    context = ssl.create_default_context(cadata=dial.ca_pem)
    if with_certificate:
        path = Path("/tmp") / f"pando-agent-test-{id(dial)}.pem"  # noqa: S108
        path.write_text(dial.client_cert_pem + dial.client_key_pem)
        path.chmod(0o600)
        try:
            context.load_cert_chain(path)
        finally:
            path.unlink()
    host, _, port = dial.address.rpartition(":")
    tcp = await anyio.connect_tcp(host, int(port))
    try:
        tls = await TLSStream.wrap(
            tcp, hostname=dial.server_name, ssl_context=context, standard_compatible=False
        )
        await tls.send(dial.first_line.encode() + b"\n")
        return await tls.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
        return b""
    finally:
        await anyio.aclose_forcefully(tcp)


async def test_a_client_without_the_authoritys_certificate_is_refused(
    engine_one: DockerAdapter, docker_engine: Any, host_namespace: Any, owner: str
) -> None:
    upstream = engine_one.upstream(pr.WorkloadRef("shop", "web"), 8080)
    await served(host_namespace, upstream)
    dial = upstream.dial
    assert dial is not None
    # The control: the same raw client with the host's certificate is let through.
    assert await inside(host_namespace, lambda: raw_tls(dial, with_certificate=True)) == b"OK\n"
    assert await inside(host_namespace, lambda: raw_tls(dial, with_certificate=False)) == b""
    stranger = Authority.generate("stranger").issue_host("stranger")
    forged = attrs.evolve(dial, client_cert_pem=stranger.cert_pem, client_key_pem=stranger.key_pem)
    # Refused at the handshake (the client sees an alert, or the connection closed before
    # any answer, whichever reaches it first): the agent's log says why.
    with pytest.raises(OSError):  # noqa: PT011
        await inside(host_namespace, lambda: http_get(attrs.evolve(upstream, dial=forged)))
    logs = docker_engine.docker("logs", f"{owner}_agent").stderr
    assert logs.count("handshake failed") == 2
    assert "client didn't provide a certificate" in logs
    assert "failed to verify certificate" in logs


async def container_netns(engine: Any, container: str) -> str:
    """A named network namespace for a running container (its PID's), for run_in."""
    pid = inspect(engine, container, "{{.State.Pid}}")
    name = f"pando-t{pid}"
    await anyio.run_process(["ip", "netns", "attach", name, pid])
    return name


async def test_another_app_on_the_engine_cannot_use_the_agent(
    engine_one: DockerAdapter, docker_engine: Any, host_namespace: Any, owner: str
) -> None:
    from localdocker import run_in  # noqa: PLC0415 - only with the harness

    upstream = engine_one.upstream(pr.WorkloadRef("shop", "web"), 8080)
    await served(host_namespace, upstream)  # the control: the host is let through
    assert upstream.dial is not None
    # Another app of the same owner: the agent is joined to its network too.
    await engine_one.apply(pr.BundlePlan(bundle_id="intruder", workloads=(web("x"),)))
    await until(engine_one, "intruder", running, "the other app")
    intruder = engine_one.naming.container_name("intruder", "web")
    network = engine_one.naming.network_name("intruder")
    agent_there = inspect(
        docker_engine,
        f"{owner}_agent",
        f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}',
    )
    gateway = inspect(
        docker_engine, intruder, f'{{{{(index .NetworkSettings.Networks "{network}").Gateway}}}}'
    )
    published = upstream.dial.address.rpartition(":")[2]
    stranger = Authority.generate("intruder").issue_host("intruder")
    namespace = await container_netns(docker_engine, intruder)
    try:
        # On the app's network the agent closes the connection before any handshake, even
        # to a client holding the host's own certificate.
        stolen = attrs.evolve(upstream.dial, address=f"{agent_there}:7443")
        with pytest.raises(ConnectionResetError, match="during the handshake"):
            await anyio.to_thread.run_sync(
                run_in, namespace, lambda: http_get(attrs.evolve(upstream, dial=stolen))
            )
        # The published port at the app's gateway is Docker's userland proxy, as for any
        # published port: there the app is a client like any other, and a certificate of
        # its own authority is refused at the handshake.
        forged = attrs.evolve(
            upstream.dial,
            address=f"{gateway}:{published}",
            client_cert_pem=stranger.cert_pem,
            client_key_pem=stranger.key_pem,
        )
        with pytest.raises(OSError):  # noqa: PT011 - an alert or a close, as above
            await anyio.to_thread.run_sync(
                run_in, namespace, lambda: http_get(attrs.evolve(upstream, dial=forged))
            )
    finally:
        await anyio.run_process(["ip", "netns", "delete", namespace], check=False)
    logs = docker_engine.docker("logs", f"{owner}_agent").stderr
    assert "a client inside the app pool" in logs
    assert "handshake failed: tls: failed to verify certificate" in logs
    # Destroying the app: the agent leaves its network, which is then removed.
    await engine_one.destroy(pr.BundleRef("intruder"))
    joined = inspect(
        docker_engine,
        f"{owner}_agent",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
    )
    assert network not in joined.split()
    assert engine_one.naming.network_name("shop") in joined.split()
    assert docker_engine.docker("network", "inspect", network, check=False).returncode != 0


async def peer_serial(upstream: pr.Upstream) -> int:
    async with await pr.connect_upstream(upstream, connect_timeout=5) as stream:
        der = stream.extra(TLSAttribute.peer_certificate_binary)  # noqa: S610 - anyio's
    from cryptography import x509  # noqa: PLC0415

    return int(x509.load_der_x509_certificate(der).serial_number)


async def test_a_renewed_certificate_and_a_new_authority_keep_serving(
    engine_one: DockerAdapter, docker_engine: Any, host_namespace: Any, owner: str, tmp_path: Path
) -> None:
    upstream = engine_one.upstream(pr.WorkloadRef("shop", "web"), 8080)
    dial = upstream.dial
    assert dial is not None
    assert engine_one.agent is not None
    await served(host_namespace, upstream)
    before = await inside(host_namespace, lambda: peer_serial(upstream))
    # A connection opened before the renewal still answers after it (nothing is cut), and
    # the next handshake already gets the new certificate.
    opened, renewed = threading.Event(), threading.Event()
    answers: list[bytes] = []

    async def across_the_renewal() -> None:
        async with await pr.connect_upstream(upstream, connect_timeout=5) as stream:
            opened.set()
            await anyio.to_thread.run_sync(renewed.wait)
            await stream.send(b"GET / HTTP/1.0\r\n\r\n")
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    answers.append(await stream.receive())

    async with anyio.create_task_group() as group:
        group.start_soon(inside, host_namespace, across_the_renewal)
        await anyio.to_thread.run_sync(opened.wait)
        await engine_one.agent.renew()
        renewed.set()
    assert b"one" in b"".join(answers)
    assert await inside(host_namespace, lambda: peer_serial(upstream)) != before
    # A new authority, the old one still trusted: the agent is given both, in place.
    rotated = agent_settings(
        docker_engine,
        owner,
        dial.server_name,
        tmp_path / "unused.pem",
        agent_ca=Authority.generate(owner).to_pem(),
        agent_trusted_cas=engine_one.agent.trusted_pem(),
    )
    rotated["agent_port"] = int(dial.address.rpartition(":")[2])
    async with DockerAdapter(rotated) as renewed_adapter:
        fresh = renewed_adapter.upstream(pr.WorkloadRef("shop", "web"), 8080)
        assert fresh.dial is not None
        assert b"one" in await served(host_namespace, fresh)
        # A host still holding a certificate of the old authority is let in.
        old_client = attrs.evolve(
            fresh.dial, client_cert_pem=dial.client_cert_pem, client_key_pem=dial.client_key_pem
        )
        assert b"one" in await served(host_namespace, attrs.evolve(fresh, dial=old_client))
