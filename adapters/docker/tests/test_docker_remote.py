"""Remote engines, reached for real: the harness's dockerd over TLS (``--tlsverify``), the same
engine over SSH (Debian's sshd in its namespace), and Docker contexts the Docker CLI writes.

Every refusal happens before a request reaches the engine: the tests check the error's own
reason and remedy, and that nothing of the owner is on the engine afterwards. The kit over
TLS and over SSH is in ``test_docker_conformance.py``; the settings' rules, and TLS failures a
real dockerd cannot show (its certificate expired or not valid yet, a server that is not an
engine), in ``test_docker_remote_units.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _docker_harness import BUSYBOX, DockerHarness
from _docker_tests import adapter_config, ssh_settings, tls_settings, until
from _socket_proxy import SocketProxy
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

pytestmark = pytest.mark.anyio

GREETING = "started"
SERVE = ("sh", "-c", f"echo {GREETING}; trap 'exit 143' TERM; while :; do sleep 0.2; done")


def plan(bundle_id: str) -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=bundle_id, workloads=(pr.WorkloadPlan(name="app", image=BUSYBOX, command=SERVE),)
    )


async def owned(harness: DockerHarness, owner: str) -> list[str]:
    """Containers and networks of ``owner`` on the engine (what an adapter wrote)."""
    label = f"label=io.pando.owner={owner}"
    found = (await harness.docker("ps", "-aq", "--filter", label)).split()
    return found + (await harness.docker("network", "ls", "-q", "--filter", label)).split()


def public_line(private_key: Path) -> str:
    """The public key of a key pair the harness made."""
    from localdocker.sshd import public_line as line  # noqa: PLC0415 - only with the harness

    return line(private_key)


async def refused_with(config: dict[str, Any]) -> pr.AdapterUnavailable:
    """The error an adapter with ``config`` raises when it opens (its first call)."""
    with pytest.raises(pr.AdapterUnavailable) as caught:
        async with DockerAdapter(config) as adapter:
            await adapter.apply(plan("never"))
    return caught.value


def fingerprint(public_line: str) -> str:
    """ssh-keygen's own fingerprint of a public key (not the adapter's computation)."""
    proc = subprocess.run(
        ["ssh-keygen", "-lf", "-"], input=public_line, capture_output=True, text=True, check=True
    )
    return proc.stdout.split()[1]


# -- TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_faults(docker_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Certificates for the refusals: another CA, and client certificates the engine refuses."""
    from localcluster.pki import issue_leaf, make_ca  # noqa: PLC0415 - only with the harness

    folder = tmp_path_factory.mktemp("tls-faults")
    other = make_ca(folder, "other-ca")
    stranger = issue_leaf(folder, other, "stranger", subject="/CN=stranger", usage="clientAuth")
    expired = docker_engine.tls.client_cert("expired", days=-1)
    for made in (other, stranger, expired):
        made.key.chmod(0o600)
    return {"other_ca": other, "stranger": stranger, "expired": expired}


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("another CA", "unknown_ca"),
        ("no client certificate", "client_certificate_missing"),
        ("an expired client certificate", "client_certificate_expired"),
        ("a client certificate of another CA", "client_certificate_refused"),
        ("a name the certificate lacks", "name_mismatch"),
    ],
)
async def test_each_tls_fault_is_refused_with_its_own_reason_and_nothing_is_written(  # noqa: PLR0917 - fixtures
    engine: Any,
    tls_proxy: SocketProxy,
    tls_faults: dict[str, Any],
    harness: DockerHarness,
    owner: str,
    fault: str,
    reason: str,
) -> None:
    # On both backends: the TLS error reaches the adapter through asyncio's or trio's stream.
    config = adapter_config(**tls_settings(engine, tls_proxy), owner=owner)
    if fault == "another CA":
        config["tls_ca"] = str(tls_faults["other_ca"].cert)
    elif fault == "no client certificate":
        del config["tls_cert"], config["tls_key"]
    elif fault == "an expired client certificate":
        config |= {"tls_cert": str(tls_faults["expired"].cert)}
        config |= {"tls_key": str(tls_faults["expired"].key)}
    elif fault == "a client certificate of another CA":
        config |= {"tls_cert": str(tls_faults["stranger"].cert)}
        config |= {"tls_key": str(tls_faults["stranger"].key)}
    else:
        config["host"] = f"tcp://localhost:{tls_proxy.port}"  # the certificate names 127.0.0.1
    error = await refused_with(config)
    assert error.details["reason"] == reason, error
    assert error.remedy != pr.AdapterUnavailable.default_remedy
    if reason == "client_certificate_expired":
        assert "expired at" in error.message
    if reason == "name_mismatch":
        assert "localhost" in error.message
    assert await owned(harness, owner) == []


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_an_exec_stdin_ends_over_tls_on_trio(
    engine: Any, tls_proxy: SocketProxy, owner: str, harness: DockerHarness
) -> None:
    # The kit over TLS runs on asyncio; on trio the half-close goes through trio's TLS stream.
    config = adapter_config(**tls_settings(engine, tls_proxy), owner=owner)
    try:
        async with DockerAdapter(config) as adapter:
            await adapter.apply(plan("tlsexec"))
            await until(adapter, "tlsexec", lambda o: o.all_running, "running")
            request = pr.ExecRequest(command=("cat",), stdin=True)
            result = await adapter.run(pr.WorkloadRef("tlsexec", "app"), request, stdin=b"over tls")
            assert result.exit_code == 0
            assert result.stdout == b"over tls"
    finally:
        await harness.remove_owned(owner)


# -- SSH ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("fault", ["a changed host key", "an unknown host", "a refused key"])
async def test_each_ssh_fault_is_refused_with_its_own_reason_and_nothing_is_written(  # noqa: PLR0917 - fixtures
    engine: Any,
    engine_sshd: Any,
    ssh_proxy: SocketProxy,
    harness: DockerHarness,
    owner: str,
    tmp_path: Path,
    fault: str,
) -> None:
    # One backend: ssh is a child process on both, and the adapter reads its words alike.
    config = adapter_config(**ssh_settings(engine, engine_sshd, ssh_proxy), owner=owner)
    if fault == "a changed host key":
        pinned = public_line(engine_sshd.other_key("impostor"))
        config["ssh_host_key"] = pinned
        error = await refused_with(config)
        assert error.details["reason"] == "host_key_changed"
        expected, presented = fingerprint(pinned), fingerprint(engine_sshd.host_public_key)
        assert expected in error.message
        assert presented in error.message
        assert error.details["presented_fingerprint"] == presented
    elif fault == "an unknown host":
        del config["ssh_host_key"]
        known = tmp_path / "known_hosts"
        known.write_text("")
        config["ssh_known_hosts"] = str(known)
        error = await refused_with(config)
        assert error.details["reason"] == "host_key_unknown"
        assert known.read_text() == ""  # never trusted on first use, nothing learnt
    else:
        config["ssh_identity"] = str(engine_sshd.other_key("stranger"))
        error = await refused_with(config)
        assert error.details["reason"] == "login_refused"
        assert "root" in error.message
    assert "authorized_keys" in error.remedy or "pin" in error.remedy.lower()
    assert await owned(harness, owner) == []


@pytest.fixture
async def ssh_adapter(
    engine: Any, engine_sshd: Any, ssh_proxy: SocketProxy, owner: str, harness: DockerHarness
) -> AsyncIterator[DockerAdapter]:
    config = adapter_config(**ssh_settings(engine, engine_sshd, ssh_proxy), owner=owner)
    try:
        async with DockerAdapter(config) as adapter:
            yield adapter
    finally:
        await harness.remove_owned(owner)


class HeldCalls:
    """Followed logs and exec sessions that stay open together until :attr:`release`."""

    def __init__(self, adapter: DockerAdapter, count: int) -> None:
        self.adapter = adapter
        self.count = count
        self.all_open = anyio.Event()
        self.release = anyio.Event()
        self.outputs: dict[str, bytes] = {}
        self._open = 0

    def _opened(self) -> None:
        self._open += 1
        if self._open == self.count:
            self.all_open.set()

    async def follow_log(self, bundle_id: str) -> None:
        options = pr.LogOptions(follow=True)
        async with self.adapter.logs(pr.WorkloadRef(bundle_id, "app"), options) as log:
            assert GREETING.encode() in await log.receive()
            self._opened()
            await self.release.wait()

    async def exec_cat(self, name: str, bundle_id: str) -> None:
        request = pr.ExecRequest(command=("cat",), stdin=True)
        async with self.adapter.exec(pr.WorkloadRef(bundle_id, "app"), request) as session:
            assert session.stdin is not None
            await session.stdin.send(name.encode())
            self._opened()
            await self.release.wait()
            await session.stdin.aclose()
            self.outputs[name] = b"".join([chunk async for chunk in session.stdout])
            assert await session.wait() == 0


async def started_bundles(events: AsyncIterator[pr.BundleEvent], wanted: set[str]) -> set[str]:
    """Bundles seen starting in ``events``, once every one of ``wanted`` has."""
    started: set[str] = set()
    async for event in events:
        if event.kind == pr.BundleEventKind.STARTED and event.bundle_id:
            started.add(event.bundle_id)
        if started >= wanted:
            break
    return started


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_thirty_calls_at_once_share_one_ssh_connection(
    ssh_adapter: DockerAdapter, engine_sshd: Any
) -> None:
    # Ten applies, ten followed logs and ten exec sessions at once, beside the event stream
    # and a watch: far more channels than sshd's MaxSessions (10, Debian's default here),
    # over one SSH connection. The logs and sessions share two running bundles.
    adapter = ssh_adapter
    serving, fresh = ["old0", "old1"], {f"new{i}" for i in range(10)}
    sessions = [(f"s{i}", serving[i % 2]) for i in range(10)]
    with anyio.fail_after(120):
        for bundle_id in serving:
            await adapter.apply(plan(bundle_id))
            await until(adapter, bundle_id, lambda o: o.all_running, "running")
    held = HeldCalls(adapter, 2 * len(sessions))
    seen: set[str] = set()

    async def apply_all() -> None:
        async with anyio.create_task_group() as group:
            for bundle_id in fresh:
                group.start_soon(adapter.apply, plan(bundle_id))
        await held.all_open.wait()
        assert engine_sshd.connections() == 1  # every channel open now rides one connection
        held.release.set()

    async def watch() -> None:
        seen.update(await started_bundles(events, fresh))

    async with adapter.watch_bundles() as events:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                group.start_soon(apply_all)
                for name, bundle_id in sessions:
                    group.start_soon(held.follow_log, bundle_id)
                    group.start_soon(held.exec_cat, name, bundle_id)
    assert held.outputs == {name: name.encode() for name, _ in sessions}
    assert seen >= fresh
    tunnel = adapter.transport.link.tunnel
    assert tunnel is not None
    assert tunnel.starts == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_call_made_while_ssh_logs_in_waits_for_the_one_connection(
    engine: Any, engine_sshd: Any, ssh_proxy: SocketProxy, owner: str
) -> None:
    # A call that comes while another has started ssh (not logged in yet, its socket not
    # bound) waits for that connection: it neither dials the socket too early nor starts a
    # second one. Pings: the one call that does not queue behind the API version's first
    # read (as no call does after a reconnect).
    settings = adapter_config(**ssh_settings(engine, engine_sshd, ssh_proxy), owner=owner)
    adapter = DockerAdapter(settings)
    tunnel = adapter.transport.link.tunnel
    assert tunnel is not None
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(adapter.transport.ping)
            with anyio.fail_after(30):
                while tunnel.starts == 0:  # noqa: ASYNC110 - ssh started by the first call
                    await anyio.sleep(0.001)
            assert await adapter.transport.ping() is not None
        assert tunnel.starts == 1
    finally:
        await adapter.aclose()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_calls_resume_after_sshd_restarts_mid_use(
    ssh_adapter: DockerAdapter, engine_sshd: Any
) -> None:
    adapter = ssh_adapter
    await adapter.apply(plan("before"))
    await until(adapter, "before", lambda o: o.all_running, "the first bundle running")
    async with adapter.watch_bundles() as events:
        engine_sshd.kill()  # the listener and the connection's processes: the connection ends
        with anyio.fail_after(60):
            while adapter.cache.connected:  # noqa: ASYNC110 - the adapter's real state
                await anyio.sleep(0.02)
        with pytest.raises(pr.AdapterUnavailable):
            await adapter.capacity()  # while sshd is down, a call says so
        engine_sshd.start()
        with anyio.fail_after(60):
            async for event in events:
                if event.kind == pr.BundleEventKind.MISSED:
                    break  # reconnected and relisted: the watcher is told to re-observe
    await adapter.apply(plan("after"))
    observed = await until(adapter, "after", lambda o: o.all_running, "the second bundle")
    assert observed.exists
    result = await adapter.run(
        pr.WorkloadRef("before", "app"), pr.ExecRequest(command=("echo", "hi"))
    )
    assert result.stdout == b"hi\n"
    tunnel = adapter.transport.link.tunnel
    assert tunnel is not None
    assert tunnel.starts >= 2


# -- Docker contexts ---------------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_context_the_docker_cli_wrote_is_taken_by_name_by_the_adapter_and_the_cli(
    engine: Any, tls_proxy: SocketProxy, tmp_path: Path, owner: str
) -> None:
    store = tmp_path / "docker-config"
    tls = engine.tls
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    cli_env["DOCKER_CONFIG"] = str(store)
    endpoint = (
        f"host=tcp://127.0.0.1:{tls_proxy.port},ca={tls.ca.cert},cert={tls.client.cert},"
        f"key={tls.client.key}"
    )
    docker = ["docker", "context", "create", "pando-remote", "--docker", endpoint]
    await anyio.run_process(docker, env=cli_env)
    async with DockerAdapter(
        {"context": "pando-remote", "docker_config": str(store), "owner": owner}
    ) as adapter:
        assert adapter.endpoint.origin == "context 'pando-remote'"
        assert adapter.endpoint.tls is not None  # the store's TLS material, verified
        assert (await adapter.capacity()).total_cpu_millis > 0
    command = [sys.executable, "-m", "pando_runtime", "--adapter", "docker", "--output", "json"]
    by_name = await anyio.run_process(
        [*command, "--set", "context=pando-remote", "capacity"], env=cli_env, check=False
    )
    assert by_name.returncode == 0, by_name.stderr.decode()
    cpus = json.loads(by_name.stdout)["total_cpu_millis"]
    assert cpus > 0
    # With no setting, the CLI's order: the current context of the store.
    await anyio.run_process(["docker", "context", "use", "pando-remote"], env=cli_env)
    current = await anyio.run_process([*command, "capacity"], env=cli_env, check=False)
    assert current.returncode == 0, current.stderr.decode()
    assert json.loads(current.stdout)["total_cpu_millis"] == cpus
