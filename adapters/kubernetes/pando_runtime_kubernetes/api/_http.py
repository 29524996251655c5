"""What one HTTP exchange with the API server is made of, apart from the transport's policy.

A streaming response read in worker threads (:class:`ResponseStream`), a body read and decoded,
the ``Retry-After`` of a throttled answer, the ``User-Agent`` every request carries, and how a
call is named in logs and metrics (:func:`describe_call`, as the API server's own metrics).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .._info import adapter_version
from ._errors import ApiError

if TYPE_CHECKING:
    import urllib3

__all__ = [
    "ResponseStream",
    "decode",
    "describe_call",
    "read_body",
    "retry_after_of",
    "user_agent",
]


class ResponseStream:
    """A streaming response (watch, followed log): read chunks in worker threads.

    Closing it shuts the socket down, which also wakes a thread blocked reading
    it: that is how cancellation never leaves a thread behind on a socket.
    """

    def __init__(
        self,
        response: urllib3.BaseHTTPResponse,
        limiter: anyio.CapacityLimiter,
        on_received: Callable[[int], None] | None = None,
    ) -> None:
        self._response = response
        self._limiter = limiter
        self._chunks = response.stream(65536, decode_content=True)
        self._on_received = on_received

    def _next(self) -> bytes:
        import urllib3  # noqa: PLC0415 - with the first call, not the adapter's import

        try:
            chunk = next(self._chunks)
        except StopIteration:
            return b""
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            if self._response.closed:
                return b""
            raise ApiError(0, f"stream broken: {error}") from error
        if self._on_received is not None:
            self._on_received(len(chunk))
        return chunk

    async def receive(self) -> bytes:
        """The next chunk; ``b""`` at the end of the stream."""
        # Reads may be abandoned: close() unblocks the thread right after.
        return await anyio.to_thread.run_sync(
            self._next, limiter=self._limiter, abandon_on_cancel=True
        )

    def close(self) -> None:
        """Shut the socket down and drop the connection (safe from any thread, twice)."""
        with contextlib.suppress(Exception):
            self._response.shutdown()
        with contextlib.suppress(Exception):
            self._response.close()
        with contextlib.suppress(Exception):
            self._response.release_conn()


def decode(data: bytes) -> dict[str, Any]:
    if not data:
        return {}
    try:
        value = json.loads(data)
    except ValueError:
        return {"message": data[:500].decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"value": value}


def user_agent(replica: str | None = None) -> str:
    """``pando-runtime-kubernetes/<version>``, then ``replica/<name>`` for a member's requests."""
    agent = f"pando-runtime-kubernetes/{adapter_version()}"
    return f"{agent} replica/{replica}" if replica else agent


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def describe_call(
    method: str, path: str, query: Mapping[str, Any] | None = None
) -> tuple[str, str, str | None]:
    """A call's verb, resource and namespace, named as the API server's own metrics name them.

    The verb is ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``,
    ``deletecollection`` or ``connect``; the resource its plural, with its group when it has
    one and its subresource (``pods/log``, ``networkpolicies.networking.k8s.io``); a
    discovery call's resource is its group (``metrics.k8s.io``) or ``version``.
    """
    parts = path.split("?", 1)[0].strip("/").split("/")
    group = ""
    if parts[0] == "api":
        rest = parts[2:]
    elif parts[0] == "apis" and len(parts) > 1:
        group, rest = parts[1], parts[3:]
    else:
        rest = []
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":  # noqa: PLR2004 - namespaces/<ns>/<plural>
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return "get", group or parts[0], namespace
    resource = f"{rest[0]}.{group}" if group else rest[0]
    if len(rest) >= 3:  # noqa: PLR2004 - <plural>/<name>/<subresource>
        resource = f"{resource}/{rest[2]}"
    named = len(rest) >= 2  # noqa: PLR2004 - <plural>/<name>
    if method == "GET":
        if (query or {}).get("watch") in ("true", True):
            return "watch", resource, namespace
        return ("get" if named else "list"), resource, namespace
    if method == "DELETE":
        return ("delete" if named else "deletecollection"), resource, namespace
    return _VERBS.get(method, method.lower()), resource, namespace


def read_body(response: urllib3.BaseHTTPResponse) -> bytes:
    """A response's body; a connection cut while it is read is an :class:`ApiError` too."""
    import urllib3  # noqa: PLC0415 - with the first call, not the adapter's import

    try:
        return response.data
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise ApiError(0, f"{type(error).__name__} reading the response: {error}") from error


def retry_after_of(response: urllib3.BaseHTTPResponse) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
