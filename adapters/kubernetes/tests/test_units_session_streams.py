"""The session's streams raise only the contract's errors; opening one can be cancelled (issue 22).

A followed log's answer may wait for its first line: the transport's open must give way to a
cancel at once, not after its read timeout. The server here is a loopback socket that accepts
and never answers; the session's error mapping runs on a scripted transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from kubernetes.client import Configuration
from pando_runtime_kubernetes import KubeTransport
from pando_runtime_kubernetes._info import KubernetesConfig
from pando_runtime_kubernetes.api._errors import ApiError
from pando_runtime_kubernetes.session._errors import ClusterErrors
from pando_runtime_kubernetes.session._streams import SessionStreams

from pando_runtime import AdapterUnavailable, NotFound

pytestmark = pytest.mark.anyio

LOG = "/api/v1/namespaces/pando-shop/pods/web-1/log"


async def test_opening_a_stream_nobody_answers_gives_way_to_a_cancel() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)  # noqa: S610 - anyio, not Django
    accepted = anyio.Event()

    async def hold(connection: SocketStream) -> None:
        accepted.set()  # the request is in; no answer will come
        async with connection:
            await anyio.sleep_forever()

    transport = KubeTransport(Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(listener.serve, hold)
            with anyio.CancelScope() as scope:

                async def cancel_once_accepted() -> None:
                    await accepted.wait()
                    scope.cancel()

                group.start_soon(cancel_once_accepted)
                # Without abandoning the open, this waits for the read timeout, then raises.
                async with transport.stream(LOG, query={"follow": "true"}, read_timeout=60):
                    pytest.fail("nothing answered, so nothing opened")
            group.cancel_scope.cancel()
    finally:
        transport.close()
    assert scope.cancelled_caught


class ScriptedStream:
    def __init__(self, chunks: list[bytes | ApiError]) -> None:
        self.chunks = chunks

    async def receive(self) -> bytes:
        item = self.chunks.pop(0) if self.chunks else b""
        if isinstance(item, ApiError):
            raise item
        return item


def _session(opened: Callable[[], ScriptedStream]) -> SessionStreams:
    """The session's streams (``session.streams``) over a scripted transport."""

    class Transport:
        @asynccontextmanager
        async def stream(
            self, path: str, *, query: Any, read_timeout: float
        ) -> AsyncIterator[ScriptedStream]:
            yield opened()

    async def transport() -> Any:
        return Transport()

    return SessionStreams(transport, ClusterErrors(None), KubernetesConfig().read_timeout)


def _fails(error: ApiError) -> Callable[[], ScriptedStream]:
    def opened() -> ScriptedStream:
        raise error

    return opened


async def _read(session: SessionStreams, *, cut_is_end: bool = False) -> bytes:
    out = b""
    async with session.stream(
        LOG, query={}, read_timeout=5, what="read the log of web-1", cut_is_end=cut_is_end
    ) as stream:
        while chunk := await stream.receive():
            out += chunk
    return out


async def test_a_stream_fails_only_with_the_contracts_errors() -> None:
    with pytest.raises(NotFound):
        await _read(_session(_fails(ApiError(404, "Not Found"))))
    with pytest.raises(AdapterUnavailable) as unavailable:
        await _read(_session(_fails(ApiError(500, "Internal Server Error"))))
    assert unavailable.value.details["status"] == 500
    with pytest.raises(AdapterUnavailable):
        await _read(_session(_fails(ApiError(0, "no answer"))))
    cut = [b"one\n", ApiError(0, "stream broken")]
    with pytest.raises(AdapterUnavailable):
        await _read(_session(lambda: ScriptedStream(list(cut))))


async def test_a_cut_ends_a_followed_stream_quietly_while_open_or_opening() -> None:
    cut = [b"one\n", ApiError(0, "stream broken"), b"never read\n"]
    assert await _read(_session(lambda: ScriptedStream(list(cut))), cut_is_end=True) == b"one\n"
    unanswered = _session(_fails(ApiError(0, "no answer")))
    assert await _read(unanswered, cut_is_end=True) == b""
    with pytest.raises(NotFound):  # gone is gone, followed or not
        await _read(_session(_fails(ApiError(404, "Not Found"))), cut_is_end=True)


async def test_a_log_read_of_a_pod_that_is_gone_is_unavailable_not_empty() -> None:
    session = _session(_fails(ApiError(404, "Not Found")))
    with pytest.raises(AdapterUnavailable) as caught:
        await session.read_log("pando-shop", "web-1", "web", 1024)
    assert caught.value.details["status"] == 404
