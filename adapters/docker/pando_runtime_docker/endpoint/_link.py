"""The transport's way to an engine: a unix socket, TCP (with TLS), or an SSH tunnel's socket.

The HTTP client asks the link where to connect (:attr:`EngineLink.base_url`,
:attr:`EngineLink.uds`, :attr:`EngineLink.ssl_context`), has it :meth:`EngineLink.ready`
before each call (an SSH connection is started, or started again after a drop), and has it
:meth:`EngineLink.explain` a failed call: a TLS handshake's or ssh's own reason, when there
is one.
"""

from __future__ import annotations

import functools
import ssl

from pando_runtime import PandoRuntimeError

from ._resolve import Endpoint
from ._ssh import SshTunnel
from ._tls import explain_tls

__all__ = ["EngineLink"]


@functools.cache
def _unused_context() -> ssl.SSLContext:
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class EngineLink:
    """How one adapter reaches its engine."""

    def __init__(self, endpoint: Endpoint, *, connect_timeout: float) -> None:
        self.endpoint = endpoint
        self.host = endpoint.host
        self.tunnel = (
            SshTunnel(endpoint.ssh, connect_timeout=connect_timeout, host=endpoint.host)
            if endpoint.ssh is not None
            else None
        )

    @property
    def base_url(self) -> str:
        """The base URL of every request."""
        return self.endpoint.base_url

    @property
    def uds(self) -> str | None:
        """The unix socket to dial (``None`` over TCP); valid once :meth:`ready` returned."""
        if self.tunnel is not None:
            return self.tunnel.socket_path
        return self.endpoint.socket

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """TLS of a ``tcp://`` engine; over a socket or plain HTTP, one no handshake uses.

        Given to the HTTP client so that it does not load a CA bundle for each new client (a
        followed stream or an exec makes one; that took 0.1 s on a busy machine); it trusts
        no CA, so it could verify nothing if it were ever used.
        """
        if self.endpoint.tls is not None:
            return self.endpoint.tls.context
        return _unused_context()

    async def ready(self) -> None:
        """Whatever must run before a connection is opened (an SSH connection)."""
        if self.tunnel is not None:
            await self.tunnel.ready()

    def explain(self, error: BaseException) -> PandoRuntimeError | None:
        """The coded error for a failed connection, when TLS or ssh says why."""
        if self.endpoint.tls is not None:
            return explain_tls(error, self.host, self.endpoint.tls)
        if self.tunnel is not None:
            return self.tunnel.explain(error)
        return None

    async def aclose(self) -> None:
        """End the SSH connection (if any). Safe to call twice."""
        if self.tunnel is not None:
            await self.tunnel.aclose()
