"""A registry the engine can pull from: the tests' registry behind a port in the engine's namespace.

The registry (``localcluster.registry``: TLS, htpasswd) listens on the host's loopback, which
the engine's namespace cannot reach. :class:`RegistryBridge` opens a listening socket on the
loopback *of the engine's namespace* (a socket made there keeps the namespace) and copies
each connection to the registry, in threads, so either async backend can use it. Nothing
outside the machine can reach either end. The daemon treats a registry on 127.0.0.0/8 as
insecure (it skips verifying the registry's own CA), so pulls need no certificate set-up.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["RegistryBridge"]


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


class RegistryBridge:
    """``127.0.0.1:<port>`` in the engine's namespace, copied to ``127.0.0.1:<target>``."""

    def __init__(self, engine: Any, target_port: int) -> None:
        self._target = target_port
        with engine.entered():
            self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def address(self) -> str:
        """``host:port`` as the engine names the registry."""
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                inside, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                outside = socket.create_connection(("127.0.0.1", self._target), timeout=10)
            except OSError:
                inside.close()
                continue
            outside.settimeout(None)
            self._open += [inside, outside]
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    @contextlib.contextmanager
    def running(self) -> Iterator[RegistryBridge]:
        """Serve for the block; close every socket after it."""
        self._thread.start()
        try:
            yield self
        finally:
            self._listener.close()
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.close()
            self._thread.join(timeout=5)
