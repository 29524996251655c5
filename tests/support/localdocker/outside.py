"""The stand-in outside world's server, and reachability checks.

One ``busybox httpd`` runs in the outside namespace, listening on every address there: each
stand-in (the internet's hosts, the metadata address, the private host) answers
``GET /`` with :data:`PAGE`, so a test tells "reached" from "blocked" by the answer, and a
control (another stand-in) shows the target was up. Beside it, the stand-in DNS server
(:mod:`.dns`) answers the stand-ins' names and logs every question. Debian's busybox
``wget`` crashes here: the checks speak HTTP through ``nc``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from localcluster.images import find_busybox
from localcluster.process import Component
from localcluster.realnode import netns

from .network import HTTP_PORT, Outside

SUPPORT_DIR = Path(__file__).resolve().parents[1]
"""``tests/support``: on the DNS server's ``PYTHONPATH``."""

PAGE = "pando stand-in outside\n"
"""What every stand-in answers."""


@dataclass(frozen=True)
class Reach:
    """The result of one reachability check: whether the stand-in answered, and the output."""

    reached: bool
    output: str

    def __bool__(self) -> bool:
        return self.reached


def http_probe_script(address: str, port: int = HTTP_PORT, timeout: int = 3) -> str:
    """A shell line for a busybox container: GET / from ``address:port`` through ``nc``."""
    request = r"GET / HTTP/1.0\r\nHost: %s\r\n\r\n" % address  # noqa: UP031 - printf's own %
    return f"printf '{request}' | nc -w {timeout} {address} {port}"


def answered(output: str) -> bool:
    """Whether ``output`` holds a stand-in's answer."""
    return output.startswith("HTTP/1.") and PAGE.strip() in output


def stand_in_server(space: str, work_dir: Path) -> Component:
    """``busybox httpd`` in namespace ``space``, serving :data:`PAGE` (not yet started)."""
    www = work_dir / "www"
    www.mkdir(parents=True, exist_ok=True)
    (www / "index.html").write_text(PAGE)
    argv = [str(find_busybox()), "httpd", "-f", "-p", str(HTTP_PORT), "-h", str(www)]
    return Component("stand-in-httpd", netns.command(space, argv), work_dir / "outside.log")


def dns_server(space: str, work_dir: Path, outside: Outside) -> Component:
    """The stand-in DNS server (:mod:`.dns`) in namespace ``space`` (not yet started); its
    log is ``work_dir / "dns-queries.jsonl"``, its ready file ``work_dir / "dns.ready"``."""
    config = work_dir / "dns.json"
    config.write_text(
        json.dumps(
            {
                "listen": outside.dns,
                "port": 53,
                "hosts": dict(outside.names),
                "log": str(work_dir / "dns-queries.jsonl"),
                "ready_file": str(work_dir / "dns.ready"),
            }
        )
    )
    (work_dir / "dns.ready").unlink(missing_ok=True)
    argv = [sys.executable, "-m", "localdocker.dns", str(config)]
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_DIR)}
    return Component("stand-in-dns", netns.command(space, argv), work_dir / "dns.log", env=env)


def host_port_relay(space: str, port: int, work_dir: Path) -> tuple[Component, Path]:
    """A relay (:mod:`localcluster.realnode.relay`) listening on ``127.0.0.1:port`` inside
    namespace ``space``, joined to the same port on the host's loopback (not yet started);
    and the file it writes once it listens."""
    config = work_dir / f"relay-{port}.json"
    ready = work_dir / f"relay-{port}.ready"
    ready.unlink(missing_ok=True)
    address = f"127.0.0.1:{port}"
    forward = {"listen_netns": space, "listen": address, "target": address}
    config.write_text(json.dumps({"forwards": [forward], "ready_file": str(ready)}))
    argv = [sys.executable, "-m", "localcluster.realnode.relay", str(config)]
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_DIR)}
    return Component(f"relay-{port}", argv, work_dir / f"relay-{port}.log", env=env), ready


def namespace_reaches(
    space: str, address: str, port: int = HTTP_PORT, timeout: float = 3.0
) -> Reach:
    """GET / from ``address:port`` with a socket made in namespace ``space``."""
    with netns.entered(space):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect((address, port))
        sock.sendall(f"GET / HTTP/1.0\r\nHost: {address}\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    except OSError as exc:
        return Reach(False, f"{type(exc).__name__}: {exc}")
    finally:
        sock.close()
    text = data.decode("utf-8", "replace")
    return Reach(answered(text), text)
