"""Start, freeze and stop one PostgreSQL or one etcd on loopback."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from localcluster.net import free_ports, wait_until
from localcluster.pki import ServerTls
from localcluster.process import Component

__all__ = ["EtcdServer", "PostgresServer", "StoreServerError"]

START_TIMEOUT = 60.0
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
"""Debian 12's PostgreSQL (tools/debian/packages.txt: postgresql)."""
UNPRIVILEGED = "nobody"
"""The user PostgreSQL runs as when the tests run as root (it refuses to run as root)."""


class StoreServerError(RuntimeError):
    """A store's server could not be found or started."""


def _binary(path: Path | str, package: str) -> str:
    found = shutil.which(str(path))
    if found is None:
        msg = f"{path} is missing: install Debian's {package} (tools/debian/install.sh)"
        raise StoreServerError(msg)
    return found


def _with_descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, parents first (from ``/proc``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        children = Path(f"/proc/{current}/task/{current}/children")
        with contextlib.suppress(OSError):
            todo.extend(int(child) for child in children.read_text().split())
    return found


class _Server:
    """One server process in a temporary directory, frozen and thawed as a process group."""

    name = "server"

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix=f"pando-{self.name}-")
        self.workdir = Path(self._tmp.name)
        self.component: Component | None = None

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        """Start the server and wait until it answers."""
        self.component = Component(self.name, self._argv(), self.workdir / f"{self.name}.log")
        self.component.start()
        component = self.component

        def died() -> str | None:
            if component.running():
                return None
            return f"{self.name} exited: {component.tail()}"

        if not wait_until(self._ready, timeout=START_TIMEOUT, abort=died):
            msg = f"{self.name} did not answer within {START_TIMEOUT:g} s: {component.tail()}"
            raise StoreServerError(msg)

    def _signal_all(self, sig: signal.Signals) -> None:
        if self.component is not None and self.component.running() and self.component.pid:
            # each process by pid: PostgreSQL's backends leave the server's process group
            for pid in _with_descendants(self.component.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def freeze(self) -> None:
        """SIGSTOP the server and every process it started: it hangs, its sockets stay open."""
        self._signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        self._signal_all(signal.SIGCONT)

    shutdown = signal.SIGTERM
    """The signal that stops the server without waiting for its clients."""

    def stop(self) -> None:
        """Stop the server (it may be started again on the same port and data)."""
        component = self.component
        if component is not None and component.running() and component.proc is not None:
            self.thaw()
            component.proc.send_signal(self.shutdown)
            try:
                component.proc.wait(10)
            except subprocess.TimeoutExpired:
                component.kill()

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
        self._tmp.cleanup()


class PostgresServer(_Server):
    """A PostgreSQL cluster of its own: ``initdb`` into a temporary directory, trust on loopback.

    ``conninfo`` reaches it as the superuser ``pando`` over TCP on 127.0.0.1.
    """

    name = "postgres"
    shutdown = signal.SIGINT  # "fast": SIGTERM would wait for every client to disconnect

    def __init__(self) -> None:
        super().__init__()
        self.port = free_ports(1)[0]
        self.data = self.workdir / "data"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            setpriv = _binary("setpriv", "util-linux")
            self._as_user = [
                setpriv,
                f"--reuid={UNPRIVILEGED}",
                "--regid=nogroup",
                "--clear-groups",
            ]
            shutil.chown(self.workdir, UNPRIVILEGED)
        initdb = _binary(POSTGRES_BIN / "initdb", "postgresql")
        subprocess.run(
            [
                *self._as_user,
                initdb,
                "-D",
                str(self.data),
                "-U",
                "pando",
                "-A",
                "trust",
                "--no-sync",
                "--no-instructions",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    @property
    def conninfo(self) -> str:
        """libpq's connection string of the cluster's ``postgres`` database."""
        return f"host=127.0.0.1 port={self.port} dbname=postgres user=pando"

    def _argv(self) -> list[str]:
        return [
            *self._as_user,
            _binary(POSTGRES_BIN / "postgres", "postgresql"),
            "-D",
            str(self.data),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-k",
            str(self.workdir),
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
        ]

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        check = subprocess.run(
            [
                _binary(POSTGRES_BIN / "pg_isready", "postgresql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "pando",
            ],
            check=False,
            capture_output=True,
            timeout=10,
        )
        return check.returncode == 0


class EtcdServer(_Server):
    """One etcd member (a cluster of one) with a temporary data directory, on loopback."""

    name = "etcd"

    def __init__(self, *, tls: bool = False, token_ttl: int | None = None) -> None:
        """``tls``: serve ``https`` and require a client certificate
        (:class:`~localcluster.pki.ServerTls`, in ``.tls``); ``token_ttl``: seconds an unused
        authentication token lives."""
        super().__init__()
        self.client_port, self.peer_port = free_ports(2)
        self.tls = ServerTls.make(self.workdir, "etcd") if tls else None
        self.token_ttl = token_ttl

    @property
    def address(self) -> str:
        """``http(s)://127.0.0.1:<port>``: the client URL, which serves the HTTP/JSON gateway."""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    def call(
        self, path: str, body: dict[str, object], token: str | None = None
    ) -> dict[str, object]:
        """POST ``body`` to the gateway (as the TLS client, with ``token``); its JSON answer."""
        request = urllib.request.Request(  # noqa: S310 - a loopback URL of our own
            f"{self.address}{path}",
            data=json.dumps(body).encode(),
            headers={"Authorization": token} if token else {},
            method="POST",
        )
        context = self.tls.context() if self.tls is not None else None
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:  # noqa: S310
            found: dict[str, object] = json.loads(answer.read())
            return found

    def enable_auth(self, users: dict[str, tuple[str, str]], root_password: str) -> None:
        """Turn etcd's authentication on: ``root``, and each user (name: password and the
        key prefix its role may read and write)."""
        self.call("/v3/auth/user/add", {"name": "root", "password": root_password})
        self.call("/v3/auth/user/grant", {"user": "root", "role": "root"})
        for user, (password, prefix) in users.items():
            raw = prefix.encode()
            perm = {
                "permType": "READWRITE",
                "key": base64.b64encode(raw).decode(),
                "range_end": base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode(),
            }
            self.call("/v3/auth/role/add", {"name": user})
            self.call("/v3/auth/role/grant", {"name": user, "perm": perm})
            self.call("/v3/auth/user/add", {"name": user, "password": password})
            self.call("/v3/auth/user/grant", {"user": user, "role": user})
        self.call("/v3/auth/enable", {})

    def _argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            _binary("etcd", "etcd-server"),
            "--name",
            "pando-test",
            "--data-dir",
            str(self.workdir / "data"),
            "--listen-client-urls",
            self.address,
            "--advertise-client-urls",
            self.address,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"pando-test={peer}",
            "--log-level",
            "warn",
            *self._secured(),
        ]

    def _secured(self) -> list[str]:
        flags = []
        if self.tls is not None:
            flags += [
                f"--cert-file={self.tls.server.cert}",
                f"--key-file={self.tls.server.key}",
                f"--trusted-ca-file={self.tls.ca.cert}",
                "--client-cert-auth",
            ]
        if self.token_ttl is not None:
            flags.append(f"--auth-token-ttl={self.token_ttl}")
        return flags

    def _ready(self) -> bool:
        context = self.tls.context() if self.tls is not None else None
        try:
            with urllib.request.urlopen(  # noqa: S310 - a loopback URL of our own
                f"{self.address}/health", timeout=2, context=context
            ) as answer:
                return b'"true"' in answer.read()
        except (OSError, urllib.error.URLError):
            return False
