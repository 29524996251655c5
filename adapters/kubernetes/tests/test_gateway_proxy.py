"""The egress gateway's configuration, run for real: Squid from Debian on loopback.

The ConfigMap the adapter writes for a plan's host-name rules is taken as is; only its
``http_port`` line is pointed at a free loopback port (the gateway listens on every address
of its pod). Squid runs in a mount namespace of its own where ``/etc/hosts`` names the test's
hosts (all 127.0.0.1), so no name is looked up outside this machine. Upstream servers listen
on 127.0.0.1. Allowed host:port pairs pass, by CONNECT and by plain HTTP; other ports, other
names and address literals get 403; a listed name that resolves into an excluded range too.
Squid is installed by ``tools/debian/install.sh`` (which ``scripts/test`` runs).
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pando_runtime_kubernetes.manifests._egress import ClusterRanges
from pando_runtime_kubernetes.manifests._gateway import (
    CONFIG_KEY,
    gateway_config,
    gateway_objects,
    squid_config,
)

from pando_runtime import EgressPolicy, EgressRule

SQUID = shutil.which("squid") or ("/usr/sbin/squid" if Path("/usr/sbin/squid").exists() else None)
pytestmark = pytest.mark.skipif(
    SQUID is None, reason="squid is not installed (tools/debian/install.sh)"
)

HOSTS = ("allowed.example.test", "other.example.test", "api.example.test")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"upstream {self.server.server_address[1]}".encode()  # type: ignore[index]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def _upstream() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _squid(config: str, tmp: Path) -> Iterator[tuple[int, Path]]:
    """Squid in the foreground with ``config`` (its http_port set to a free loopback port)."""
    port = _free_port()
    lines = config.splitlines()
    assert sum(line.startswith("http_port ") for line in lines) == 1
    local = (
        "\n".join(
            f"http_port 127.0.0.1:{port}" if line.startswith("http_port ") else line
            for line in lines
        )
        + "\n"
    )
    (tmp / "squid.conf").write_text(local)
    (tmp / "hosts").write_text("".join(f"127.0.0.1 {host}\n" for host in HOSTS))
    log = tmp / "squid.log"
    log.touch()
    with contextlib.suppress(KeyError, PermissionError):
        # Squid started as root runs as Debian's 'proxy' user and reopens its stdout then.
        shutil.chown(log, "proxy")
    script = f'mount --bind "{tmp}/hosts" /etc/hosts && exec "{SQUID}" -N -f "{tmp}/squid.conf"'
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["unshare", "--mount", "sh", "-c", script],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                text = log.read_text(errors="replace")
                if "unshare" in text or "mount" in text:
                    pytest.skip(f"cannot give squid its own /etc/hosts here: {text[-300:]}")
                raise AssertionError(f"squid exited: {text[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.1)
        yield port, log
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _get(proxy: int, url: str) -> tuple[int, bytes]:
    """A plain HTTP request through the proxy."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy, timeout=10)
    try:
        connection.request("GET", url)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _tunnel(proxy: int, host: str, port: int) -> tuple[int, bytes]:
    """CONNECT through the proxy; when it is open, a GET through the tunnel."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy, timeout=10)
    try:
        connection.set_tunnel(host, port)
        connection.request("GET", "/")
        response = connection.getresponse()
        return response.status, response.read()
    except OSError as error:
        # http.client reports a refused CONNECT as an OSError naming the status.
        text = str(error)
        for code in (403, 503):
            if str(code) in text:
                return code, b""
        raise
    finally:
        connection.close()


def _adapter_config(rules: tuple[EgressRule, ...], ranges: ClusterRanges) -> str:
    """The squid.conf of the ConfigMap the adapter writes for ``rules``."""
    written = gateway_config(EgressPolicy(allow=rules), ranges)
    assert written is not None
    objects = gateway_objects("pando-app", "app", written, labels={})
    configmap = next(o for o in objects if o["kind"] == "ConfigMap")
    config: str = configmap["data"][CONFIG_KEY]
    assert config == squid_config([r for r in rules if not r.is_cidr], ranges.excluded)
    return config


def test_allowed_hosts_pass_and_everything_else_is_refused(tmp_path: Path) -> None:
    with _upstream() as allowed_port, _upstream() as other_port:
        rules = (
            EgressRule(destination="allowed.example.test", ports=(allowed_port,)),
            EgressRule(destination="203.0.113.0/24", ports=(443,)),  # CIDR: not the proxy's
        )
        config = _adapter_config(rules, ClusterRanges.from_settings(None, None, None))
        with _squid(config, tmp_path) as (proxy, _log):
            assert _tunnel(proxy, "allowed.example.test", allowed_port) == (
                200,
                f"upstream {allowed_port}".encode(),
            )
            status, body = _get(proxy, f"http://allowed.example.test:{allowed_port}/")
            assert (status, body) == (200, f"upstream {allowed_port}".encode())
            # The allowed name on another port, other names, and address literals: refused.
            assert _tunnel(proxy, "allowed.example.test", other_port)[0] == 403
            assert _get(proxy, f"http://allowed.example.test:{other_port}/")[0] == 403
            assert _tunnel(proxy, "other.example.test", allowed_port)[0] == 403
            assert _get(proxy, f"http://other.example.test:{allowed_port}/")[0] == 403
            assert _tunnel(proxy, "127.0.0.1", allowed_port)[0] == 403
            assert _get(proxy, f"http://127.0.0.1:{allowed_port}/")[0] == 403


def test_a_rule_without_ports_allows_every_port_of_its_host_only(tmp_path: Path) -> None:
    with _upstream() as first, _upstream() as second:
        rules = (EgressRule(destination="api.example.test"),)
        config = _adapter_config(rules, ClusterRanges.from_settings(None, None, None))
        with _squid(config, tmp_path) as (proxy, _log):
            for port in (first, second):
                assert _tunnel(proxy, "api.example.test", port)[0] == 200
            assert _tunnel(proxy, "allowed.example.test", first)[0] == 403


def test_a_listed_name_resolving_into_an_excluded_range_is_refused(tmp_path: Path) -> None:
    with _upstream() as port:
        rules = (EgressRule(destination="allowed.example.test", ports=(port,)),)
        # As if loopback were one of the cluster's ranges: the name resolves into it.
        ranges = ClusterRanges.from_settings("127.0.0.0/8", "10.96.0.0/12", None)
        config = _adapter_config(rules, ranges)
        assert "127.0.0.0/8" in config
        with _squid(config, tmp_path) as (proxy, _log):
            assert _tunnel(proxy, "allowed.example.test", port)[0] == 403
            assert _get(proxy, f"http://allowed.example.test:{port}/")[0] == 403
