"""A host's one call to reach an upstream: directly, or through the runtime's relay (API 1.4).

:func:`connect_upstream` opens a byte stream to a workload's port from an
:class:`~pando_runtime.Upstream`: a TCP connection to the URL's host and port when the upstream
has no ``dial``, else TLS 1.3 to the relay ``dial`` names (its certificate verified, the
host's presented), its first line sent and the relay's answer read. Whatever fails to connect
raises an :class:`OSError` (a refusal by the relay is a :class:`ConnectionRefusedError`
carrying its reason), so a proxy handles both ways alike.
"""

from __future__ import annotations

import contextlib
import functools
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from ._contract._refs import Upstream, UpstreamDial

__all__ = ["connect_upstream"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_ANSWER = 512
"""Longest answer line a relay may send (its newline included)."""


async def connect_upstream(upstream: Upstream, *, connect_timeout: float = 10.0) -> ByteStream:
    """Open a byte stream to ``upstream``; the caller closes it (``async with``).

    Without ``upstream.dial``: a TCP connection to the URL's host and port (the default port
    of its scheme when it names none). With it: TLS 1.3 to ``dial.address``, the relay's
    certificate checked against ``dial.ca_pem`` for ``dial.server_name``, the host's
    certificate presented, ``dial.first_line`` sent; the stream carries the upstream's bytes
    once the relay answered ``OK``. A TLS stream cannot be half-closed (``send_eof``
    raises ``NotImplementedError``, as anyio's TLS streams do).

    Args:
        upstream: What the adapter's ``upstream()`` returned.
        connect_timeout: Seconds for the connection, the handshake and the relay's answer.

    Raises:
        ConnectionRefusedError: The port refused, or the relay refused the target (its
            reason in the message).
        OSError: Any other failure to connect (``TimeoutError``, ``ssl.SSLError``...).
    """
    if upstream.dial is None:
        host, port = _host_port(upstream.url)
        with _deadline(connect_timeout, f"connecting to {host}:{port}"):
            return await anyio.connect_tcp(host, port)
    return await _through_relay(upstream.dial, connect_timeout)


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"upstream URL {url!r} names no host")
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    if port is None:
        raise ValueError(f"upstream URL {url!r} names no port")
    return parts.hostname, port


@contextlib.contextmanager
def _deadline(seconds: float, what: str) -> Any:
    try:
        with anyio.fail_after(seconds):
            yield
    except TimeoutError:
        raise TimeoutError(f"{what}: no answer within {seconds:g} s") from None


async def _through_relay(dial: UpstreamDial, limit: float) -> ByteStream:
    host, _, port_text = dial.address.rpartition(":")
    if not host or not port_text.isdigit():
        raise ValueError(f"relay address {dial.address!r} is not host:port")
    context = _client_context(dial.ca_pem, dial.client_cert_pem, dial.client_key_pem)
    with _deadline(limit, f"reaching the relay at {dial.address}"):
        tcp = await anyio.connect_tcp(host.strip("[]"), int(port_text))
        try:
            tls = await TLSStream.wrap(
                tcp,
                hostname=dial.server_name,
                ssl_context=context,
                standard_compatible=False,
            )
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            await anyio.aclose_forcefully(tcp)
            raise ConnectionResetError(
                f"the relay at {dial.address} closed the connection during the handshake"
            ) from None
        except BaseException:
            await anyio.aclose_forcefully(tcp)
            raise
        try:
            await tls.send(dial.first_line.encode() + b"\n")
            answer, rest = await _answer_line(tls)
        except BaseException:
            await anyio.aclose_forcefully(tls)
            raise
    if answer != "OK":
        await anyio.aclose_forcefully(tls)
        raise ConnectionRefusedError(f"the relay at {dial.address} refused: {answer}")
    return _Prefixed(tls, rest)


async def _answer_line(stream: ByteStream) -> tuple[str, bytes]:
    """The relay's answer line (without its newline) and the bytes that came after it."""
    data = b""
    while b"\n" not in data:
        if len(data) >= _MAX_ANSWER:
            raise ConnectionRefusedError("the relay's answer is no line")
        try:
            data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            raise ConnectionRefusedError(
                f"the relay closed the connection before answering ({data[:80]!r})"
            ) from None
    line, _, rest = data.partition(b"\n")
    return line.decode("utf-8", "replace").strip(), rest


@functools.lru_cache(maxsize=32)
def _client_context(ca_pem: str, cert_pem: str, key_pem: str) -> ssl.SSLContext:
    """TLS 1.3 trusting ``ca_pem`` alone, presenting the host's certificate.

    Cached: one context per credentials, reused for every connection.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_pem)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    # load_cert_chain reads files only: the key goes to a 0600 file, removed at once.
    fd, path = tempfile.mkstemp(prefix="pando-dial-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(cert_pem.rstrip("\n") + "\n" + key_pem)
        context.load_cert_chain(path)
    finally:
        Path(path).unlink()
    return context


class _Prefixed(ByteStream):
    """A stream that first gives back bytes already read from it (what followed ``OK``)."""

    def __init__(self, stream: ByteStream, pending: bytes) -> None:
        self._stream = stream
        self._pending = pending

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._pending:
            chunk, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
            await anyio.lowlevel.checkpoint()
            return chunk
        return await self._stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._stream.extra_attributes
