"""The relay between the host and the real nodes' namespaces, run as a process of its own.

The namespaces have no route to the host (that is the safety boundary), so whatever must
cross goes through this process, which makes each socket in the namespace it belongs to:

* forwards: a listener inside a namespace (``127.0.0.1:<port>`` for kubelet and containerd, an
  address on the stand-in outside network for pods) whose connections are joined to a TCP
  address on the host's loopback (the API server, the image registry);
* the API server's way in: an HTTP ``CONNECT`` proxy on a Unix socket, named in the API
  server's egress selector (as a Konnectivity server would be), that dials each target from the
  namespace that holds its address (a kubelet, a pod) or from the host (kwok, metrics-server).

Only these paths exist; nothing is routed. Usage: ``python -m localcluster.realnode.relay
CONFIG.json`` where the file holds ``forwards`` (``listen_netns``, ``listen``, ``target``) and
``connect_proxy`` (``socket``, ``routes``: CIDR -> namespace).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import netns

_BUFFER = 65536


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(_BUFFER):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (sink, source):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _join(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until either side ends, then close both."""
    other = threading.Thread(target=_pipe, args=(b, a), daemon=True)
    other.start()
    _pipe(a, b)
    other.join()
    a.close()
    b.close()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _dial(address: tuple[str, int], space: str | None, timeout: float = 10.0) -> socket.socket:
    """A TCP connection to ``address`` made from namespace ``space`` (the host's when None)."""
    if space is None:
        return socket.create_connection(address, timeout=timeout)
    with netns.entered(space):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
    except OSError:
        sock.close()
        raise
    sock.settimeout(None)
    return sock


def _listen(address: tuple[str, int], space: str | None) -> socket.socket:
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        return sock

    if space is None:
        return make()
    with netns.entered(space):
        return make()


def _serve_forward(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        client, _ = listener.accept()

        def handle(client: socket.socket = client) -> None:
            try:
                upstream = _dial(target, None)
            except OSError:
                client.close()
                return
            _join(client, upstream)

        threading.Thread(target=handle, daemon=True).start()


class Router:
    """Which namespace holds an address (None: the host)."""

    def __init__(self, routes: Mapping[str, str]) -> None:
        self._routes = [(ipaddress.ip_network(cidr), space) for cidr, space in routes.items()]

    def space(self, host: str) -> str | None:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None  # a name: the host resolves it (kwok and the like use addresses)
        for network, space in self._routes:
            if address in network:
                return space
        return None


def _read_head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise OSError("connection closed before the request ended")
        data += chunk
        if len(data) > 65536:
            raise OSError("request head too long")
    return data


def _serve_connect(listener: socket.socket, router: Router) -> None:
    while True:
        client, _ = listener.accept()

        def handle(client: socket.socket = client) -> None:
            try:
                head = _read_head(client)
                method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
                if method != "CONNECT":
                    client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                    client.close()
                    return
                host, port = _address(target)
                upstream = _dial((host, port), router.space(host))
            except (OSError, ValueError) as exc:
                try:
                    client.sendall(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{exc}".encode())
                finally:
                    client.close()
                return
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                upstream.sendall(rest)
            _join(client, upstream)

        threading.Thread(target=handle, daemon=True).start()


def serve(config: Mapping[str, Any]) -> None:
    """Open every listener of ``config`` and serve until killed."""
    threads = []
    for forward in config.get("forwards", ()):
        listener = _listen(_address(forward["listen"]), forward.get("listen_netns"))
        target = _address(forward["target"])
        threads.append(threading.Thread(target=_serve_forward, args=(listener, target)))
    proxy = config.get("connect_proxy")
    if proxy:
        sock_path = Path(proxy["socket"])
        sock_path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock_path))
        sock_path.chmod(0o600)
        listener.listen(128)
        router = Router(proxy.get("routes", {}))
        threads.append(threading.Thread(target=_serve_connect, args=(listener, router)))
    for t in threads:
        t.daemon = True
        t.start()
    ready = config.get("ready_file")
    if ready:
        Path(ready).write_text("ready\n")
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


def main(argv: list[str]) -> int:
    """Entry point: ``relay CONFIG.json``."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    serve(json.loads(Path(argv[1]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
