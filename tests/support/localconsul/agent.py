"""Start and stop one ``consul agent -dev`` on loopback."""

from __future__ import annotations

import json
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from localcluster.binaries import go_tool
from localcluster.net import free_ports, retry_on_taken_port, wait_until
from localcluster.pki import ServerTls
from localcluster.process import Component

ENV_BIN = "PANDO_CONSUL_BIN"
"""Environment variable naming a directory that already holds ``consul``."""

PORTS = ("http", "dns", "grpc", "grpc-tls", "serf-lan", "serf-wan", "server")
"""Every port the dev agent opens (gRPC over TLS too: its fixed default collides between agents)."""


class ConsulError(RuntimeError):
    """Consul could not be built, found or started."""


def find_consul() -> Path:
    """The ``consul`` binary: from ``PANDO_CONSUL_BIN``, else built by the build script."""
    return go_tool("consul", "consul", ENV_BIN, timeout=3600)


class ConsulAgent:
    """One dev-mode agent: ``with ConsulAgent() as consul: consul.http_address``."""

    def __init__(
        self, binary: Path | None = None, *, workdir: Path | None = None, tls: bool = False
    ) -> None:
        """``tls``: serve the HTTP API over TLS too (``https_address``), requiring a client
        certificate there (:class:`~localcluster.pki.ServerTls`, in ``.tls``)."""
        self.binary = binary or find_consul()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="pando-consul-")
            workdir = Path(self._tmp.name)
        self.workdir = workdir
        self.tls = ServerTls.make(workdir, "consul") if tls else None
        self.ports: dict[str, int] = {}
        self.component = self._on_free_ports()

    def _on_free_ports(self) -> Component:
        """The agent's process, on ports free a moment ago (see :func:`free_ports`)."""
        names = (*PORTS, "https") if self.tls is not None else PORTS
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        argv = [
            str(self.binary),
            "agent",
            "-dev",
            "-bind=127.0.0.1",
            "-client=127.0.0.1",
            "-node=pando-test-agent",
            "-log-level=warn",
            *(f"-{name}-port={port}" for name, port in self.ports.items()),
        ]
        if self.tls is not None:
            tls = self.tls
            files = (
                f'ca_file = "{tls.ca.cert}" cert_file = "{tls.server.cert}" '
                f'key_file = "{tls.server.key}"'
            )
            argv.append(f"-hcl=tls {{ defaults {{ {files} }} https {{ verify_incoming = true }} }}")
        return Component("consul", argv, self.workdir / "consul.log")

    @property
    def http_address(self) -> str:
        """``http://127.0.0.1:<port>`` of the HTTP API."""
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def https_address(self) -> str:
        """``https://127.0.0.1:<port>`` of the HTTP API over TLS (an agent made with ``tls``)."""
        return f"https://127.0.0.1:{self.ports['https']}"

    def _leader(self) -> bool:
        try:
            with urllib.request.urlopen(  # noqa: S310 - a loopback http URL of our own
                f"{self.http_address}/v1/status/leader", timeout=2
            ) as response:
                return bool(json.loads(response.read()))
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def _died(self) -> str | None:
        code = self.component.exit_code()
        if code is None:
            return None
        return f"consul exited with {code}:\n{self.component.tail()}"

    def start(self, timeout: float = 60.0) -> None:
        """Start the agent and wait until it has elected itself leader.

        Another process may bind one of the chosen ports between their choice and the agent's
        start (a second test run on the machine): the agent then exits saying so, and starts
        again on other ports (:func:`~localcluster.net.retry_on_taken_port`).
        """

        def attempt() -> None:
            self.component.start()
            try:
                if wait_until(self._leader, timeout=timeout, abort=self._died):
                    return
            except RuntimeError as died:
                raise ConsulError(str(died)) from died
            raise ConsulError(f"consul elected no leader in {timeout} s:\n{self.component.tail()}")

        def choose_again() -> None:
            self.component.stop()
            self.component = self._on_free_ports()

        try:
            retry_on_taken_port(attempt, reset=choose_again)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """``consul leave`` (a clean exit), then SIGTERM/SIGKILL if it is still there."""
        if self.component.running():
            subprocess.run(
                [str(self.binary), "leave", f"-http-addr={self.http_address}"],
                capture_output=True,
                check=False,
                timeout=30,
            )
            proc = self.component.proc
            if proc is not None:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.component.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
