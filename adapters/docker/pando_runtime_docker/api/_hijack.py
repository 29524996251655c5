"""A hijacked connection: the raw stream left after the daemon upgrades an exec or attach.

The request asks for the upgrade (``Connection: Upgrade``, ``Upgrade: tcp``: Podman only
hijacks when asked); on ``101`` httpcore hands over its ``network_stream``. Writing the
command's stdin and reading its output happen on that stream; the end of stdin is a
shutdown of the socket's write side (the command then sees end-of-file while its output
still arrives), reached through the stream's ``socket`` extra info on both anyio backends.
"""

from __future__ import annotations

import socket
from typing import Any

import anyio
import httpcore
import httpx

__all__ = ["HijackedStream"]

_READ = 65536


class HijackedStream:
    """Both directions of an upgraded connection; owns the client that opened it."""

    def __init__(self, client: httpx.AsyncClient, response: httpx.Response) -> None:
        self._client = client
        self._response = response
        self._stream: Any = response.extensions["network_stream"]
        self._write_closed = False
        self._closed = False

    async def receive(self, max_bytes: int = _READ) -> bytes:
        """The next bytes the daemon sends; ``b""`` at the end (or once closed here)."""
        if self._closed:
            return b""
        try:
            data: bytes = await self._stream.read(max_bytes)
        except (httpcore.NetworkError, OSError):
            if self.closed:  # closed here while the read waited
                return b""
            raise
        return data

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    async def send(self, data: bytes) -> None:
        """Write ``data`` to the command's stdin (``BrokenResourceError`` once it ended)."""
        if self._closed or self._write_closed:
            raise anyio.ClosedResourceError
        try:
            await self._stream.write(data)
        except (httpcore.NetworkError, OSError) as error:
            raise anyio.BrokenResourceError from error

    def close_write(self) -> None:
        """End the command's stdin (half-close); its output can still be read."""
        if self._write_closed or self._closed:
            return
        self._write_closed = True
        raw = self._stream.get_extra_info("socket")
        if raw is not None:
            try:
                raw.shutdown(socket.SHUT_WR)
            except OSError:  # the daemon already closed it
                return

    async def aclose(self) -> None:
        """Close the connection and the client that opened it. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._stream.aclose()
        finally:
            await self._response.aclose()
            await self._client.aclose()
