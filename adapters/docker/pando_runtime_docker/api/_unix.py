"""Unix-socket connections a cancellation cannot trip over, on asyncio as on trio.

anyio's own unix stream on asyncio waits for a readable socket with a bare
``Future.set_result`` as the selector's callback: when a read is cancelled in the same
loop turn the socket turns readable (the adapter stopping its event stream while events
arrive), the callback still runs and the loop reports an ``InvalidStateError``. Here the
connected socket is handed to anyio's :meth:`~anyio.abc.SocketStream.from_socket`, which
on asyncio wraps it in a transport (as every TCP stream is) and on trio in trio's stream;
the connect waits with :func:`anyio.wait_writable`, which tolerates a cancelled wait.
:class:`UnixSocketBackend` is that connection for httpcore, under the engine client.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
from collections.abc import Iterable, Iterator
from typing import Any

import anyio
import httpcore
import httpx
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.tls import TLSAttribute, TLSStream

__all__ = ["UnixSocketBackend", "connect_unix", "unix_transport"]


async def connect_unix(path: str | os.PathLike[str]) -> SocketStream:
    """A stream connected to the unix socket at ``path`` (``OSError`` when refused)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)  # noqa: FBT003 - the stream wrappers want it
        try:
            sock.connect(os.fspath(path))
        except BlockingIOError:  # the listener's backlog is full: wait for room
            await anyio.wait_writable(sock)
            failed = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if failed:
                raise OSError(failed, os.strerror(failed), os.fspath(path)) from None
        return await SocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise


def unix_transport(path: str, ssl_context: ssl.SSLContext) -> httpx.AsyncHTTPTransport:
    """The ``httpx`` transport to the unix socket at ``path``, its connections made here.

    ``ssl_context`` is one no handshake uses (httpx would otherwise load a CA bundle).
    """
    transport = httpx.AsyncHTTPTransport(uds=path, verify=ssl_context, retries=0, trust_env=False)
    # httpx 0.28 takes no network backend: the pool it built is rebuilt around ours, with
    # httpx's default limits (the pin on httpx < 0.29 keeps this attribute where it is).
    limits = httpx.Limits()
    transport._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001
        uds=path,
        ssl_context=ssl_context,
        retries=0,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=UnixSocketBackend(),
    )
    return transport


class UnixSocketBackend(httpcore.AsyncNetworkBackend):
    """httpcore's connections to a unix socket, made by :func:`connect_unix`."""

    def __init__(self) -> None:
        self._tcp = httpcore.AnyIOBackend()

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(_CONNECT_ERRORS):
            with anyio.fail_after(timeout):
                stream = await connect_unix(path)
            for option in socket_options or ():
                stream.extra(SocketAttribute.raw_socket).setsockopt(*option)  # noqa: S610 - anyio
        return _NetworkStream(stream)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self._tcp.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


_CONNECT_ERRORS: dict[type[Exception], type[Exception]] = {
    TimeoutError: httpcore.ConnectTimeout,
    OSError: httpcore.ConnectError,
}
_READ_ERRORS: dict[type[Exception], type[Exception]] = {
    TimeoutError: httpcore.ReadTimeout,
    anyio.BrokenResourceError: httpcore.ReadError,
    anyio.ClosedResourceError: httpcore.ReadError,
    OSError: httpcore.ReadError,
}
_WRITE_ERRORS: dict[type[Exception], type[Exception]] = {
    TimeoutError: httpcore.WriteTimeout,
    anyio.BrokenResourceError: httpcore.WriteError,
    anyio.ClosedResourceError: httpcore.WriteError,
    OSError: httpcore.WriteError,
}
_HANDSHAKE_ERRORS: dict[type[Exception], type[Exception]] = {
    TimeoutError: httpcore.ConnectTimeout,
    anyio.BrokenResourceError: httpcore.ConnectError,
    OSError: httpcore.ConnectError,
}


class _NetworkStream(httpcore.AsyncNetworkStream):
    """An anyio byte stream as httpcore reads and writes it."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self._stream = stream

    async def read(
        self,
        max_bytes: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> bytes:
        with _mapped(_READ_ERRORS), anyio.fail_after(timeout):
            try:
                return await self._stream.receive(max_bytes)
            except anyio.EndOfStream:
                return b""

    async def write(
        self,
        buffer: bytes,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> None:
        if buffer:
            with _mapped(_WRITE_ERRORS), anyio.fail_after(timeout):
                await self._stream.send(buffer)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(_HANDSHAKE_ERRORS):
            with anyio.fail_after(timeout):
                wrapped = await TLSStream.wrap(
                    self._stream,
                    ssl_context=ssl_context,
                    hostname=server_hostname,
                    standard_compatible=False,
                )
        return _NetworkStream(wrapped)

    def get_extra_info(self, info: str) -> Any:
        """``socket`` is the raw socket (a hijacked stream half-closes it); others as httpcore's."""
        attribute = {
            "socket": SocketAttribute.raw_socket,
            "client_addr": SocketAttribute.local_address,
            "server_addr": SocketAttribute.remote_address,
        }.get(info)
        if attribute is not None:
            return self._stream.extra(attribute, None)  # noqa: S610 - anyio
        if info == "ssl_object":
            return self._stream.extra(TLSAttribute.ssl_object, None)  # noqa: S610 - anyio
        if info == "is_readable":
            raw = self._stream.extra(SocketAttribute.raw_socket, None)  # noqa: S610 - anyio
            return raw is not None and _readable(raw)
        return None


def _readable(sock: socket.socket) -> bool:
    """Whether the socket is readable now.

    An idle pooled connection that is was closed by the daemon (or sent what nobody asked
    for): httpcore drops it rather than reuse it.
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


@contextlib.contextmanager
def _mapped(errors: dict[type[Exception], type[Exception]]) -> Iterator[None]:
    try:
        yield
    except Exception as error:
        for caught, raised in errors.items():
            if isinstance(error, caught):
                raise raised(error) from error
        raise
