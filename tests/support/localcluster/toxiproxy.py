"""Toxiproxy, the fault proxy: its server as a child process on loopback, and a small client.

Toxiproxy is an L4 proxy: TLS passes through untouched, so a client of a proxied API server
still verifies the server's own certificate (its SAN holds 127.0.0.1, the proxy's address).
The client speaks Toxiproxy's HTTP API (``/proxies``, ``/proxies/{name}/toxics``, ``/reset``)
with the standard library; the published Python clients are unmaintained.

Binaries come from ``PANDO_TOXIPROXY_BIN`` or from ``tools/toxiproxy/build.sh`` (built once
into a cache outside the repository).
"""

from __future__ import annotations

import json
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from .binaries import go_tool
from .cluster import LocalCluster
from .errors import ClusterError
from .net import free_ports, retry_on_taken_port, wait_until
from .process import Component

ENV_TOXIPROXY_BIN = "PANDO_TOXIPROXY_BIN"
"""Environment variable naming a directory that holds ``toxiproxy-server``."""


def find_toxiproxy() -> Path:
    """The ``toxiproxy-server`` binary, built first by ``tools/toxiproxy/build.sh`` if needed."""
    return go_tool("toxiproxy", "toxiproxy-server", ENV_TOXIPROXY_BIN, timeout=900)


class ToxiproxyError(ClusterError):
    """Toxiproxy's API refused a request."""


@dataclass(frozen=True)
class Proxy:
    """One proxy: where it listens and what it forwards to."""

    name: str
    listen: str
    upstream: str

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.listen.rsplit(":", 1)[1])


class Toxiproxy:
    """A client of one Toxiproxy server's HTTP API."""

    def __init__(self, api: str) -> None:
        self.api = api.rstrip("/")

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - http on loopback only
            self.api + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise ToxiproxyError(
                f"{method} {path}: HTTP {error.code}: {error.read().decode(errors='replace')}"
            ) from error
        return json.loads(raw) if raw.strip() else None

    def version(self) -> str:
        """The server's version."""
        request = urllib.request.Request(self.api + "/version")  # noqa: S310
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return str(response.read().decode().strip())

    def create(self, name: str, upstream: str, *, listen: str = "127.0.0.1:0") -> Proxy:
        """A proxy from ``listen`` (a free port by default) to ``upstream``."""
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
        answer = self._call("POST", "/proxies", body)
        return Proxy(name, str(answer["listen"]), str(answer["upstream"]))

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        """Disable (connections refused, open ones closed) or re-enable a proxy."""
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def add_toxic(
        self,
        proxy: str,
        kind: str,
        *,
        name: str | None = None,
        stream: str = "downstream",
        toxicity: float = 1.0,
        **attributes: float,
    ) -> str:
        """Add a toxic (``latency``, ``timeout``, ``reset_peer``, ``bandwidth``, ...); its name."""
        name = name or f"{kind}_{stream}"
        body = {
            "name": name,
            "type": kind,
            "stream": stream,
            "toxicity": toxicity,
            "attributes": attributes,
        }
        self._call("POST", f"/proxies/{proxy}/toxics", body)
        return name

    def remove_toxic(self, proxy: str, name: str) -> None:
        """Remove one toxic."""
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        """The toxics of a proxy."""
        return list(self._call("GET", f"/proxies/{proxy}/toxics") or ())

    @contextmanager
    def toxic(self, proxy: str, kind: str, **options: Any) -> Iterator[str]:
        """A toxic for the duration of the block (removed on every way out)."""
        name = self.add_toxic(proxy, kind, **options)
        try:
            yield name
        finally:
            self.remove_toxic(proxy, name)

    @contextmanager
    def disabled(self, proxy: str) -> Iterator[None]:
        """The proxy is down for the block (connections refused), up again afterwards."""
        self.set_enabled(proxy, False)
        try:
            yield
        finally:
            self.set_enabled(proxy, True)

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self._call("POST", "/reset")


class ToxiproxyServer:
    """``toxiproxy-server`` on 127.0.0.1, for the duration of a ``with`` block."""

    def __init__(self, *, binary: Path | None = None, log_dir: Path | None = None) -> None:
        self.binary = binary
        self.log_dir = log_dir
        self.port = 0
        self._component: Component | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def client(self) -> Toxiproxy:
        """A client of this server's API."""
        return Toxiproxy(f"http://127.0.0.1:{self.port}")

    def start(self) -> Self:
        """Start the server and wait until its API answers."""
        binary = self.binary or find_toxiproxy()
        if self.log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="pando-toxiproxy-")
            self.log_dir = Path(self._tmp.name)
        try:
            retry_on_taken_port(lambda: self._start_on_a_free_port(binary), reset=self._stop_server)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_on_a_free_port(self, binary: Path) -> None:
        assert self.log_dir is not None
        (self.port,) = free_ports(1)
        argv = [str(binary), "-host", "127.0.0.1", "-port", str(self.port)]
        self._component = Component("toxiproxy", argv, self.log_dir / "toxiproxy.log")
        self._component.start()
        client = self.client

        def up() -> bool:
            try:
                client.version()
            except OSError:
                return False
            return True

        def died() -> str | None:
            code = self._component.exit_code() if self._component else None
            return None if code is None else f"exited with code {code}"

        try:
            answered = wait_until(up, timeout=15, abort=died)
        except RuntimeError as exited:
            answered, reason = False, str(exited)
        else:
            reason = "did not answer in 15 s"
        if not answered:
            tail = self._component.tail()
            raise ClusterError(f"toxiproxy on port {self.port}: {reason}\n{tail}")

    def _stop_server(self) -> None:
        if self._component is not None:
            self._component.stop()
            self._component = None

    def stop(self) -> None:
        """Stop the server (its proxies go with it)."""
        self._stop_server()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class ProxiedApiServer:
    """A cluster's API server behind a Toxiproxy proxy, with kubeconfigs through it."""

    toxiproxy: Toxiproxy
    proxy: Proxy
    kubeconfig: Path
    """The admin identity, through the proxy."""
    restricted_kubeconfig: Path
    """The restricted identity, through the proxy."""


def proxy_apiserver(
    cluster: LocalCluster, server: ToxiproxyServer, *, name: str = "apiserver"
) -> ProxiedApiServer:
    """A proxy in front of ``cluster``'s API server, and kubeconfigs that go through it.

    The kubeconfigs verify the API server's certificate as the direct ones do: the proxy
    listens on 127.0.0.1, which the certificate names.
    """
    client = server.client
    upstream = cluster.server.removeprefix("https://")
    proxy = client.create(name, upstream)
    url = f"https://{proxy.listen}"
    return ProxiedApiServer(
        toxiproxy=client,
        proxy=proxy,
        kubeconfig=cluster.write_kubeconfig_for(url, restricted=False, name=f"{name}-admin"),
        restricted_kubeconfig=cluster.write_kubeconfig_for(
            url, restricted=True, name=f"{name}-restricted"
        ),
    )
