"""The one transport every API call goes through.

:class:`KubeTransport` is the only place that talks HTTP, to one cluster (a
:class:`~pando_runtime_kubernetes.Cluster`, or any client ``Configuration``). It
counts every call (the benchmark and the idempotency tests read the counter),
takes a token from our own :class:`TokenBucket`, runs the blocking urllib3
call in a worker thread under the adapter's own ``CapacityLimiter`` (never the
host's default one) and always sets connect and read timeouts, so a cancelled
host task never leaves a thread stuck on a socket for long. Bodies stay plain
JSON dicts: the generated models are slow and not needed for what we project.

Every request names its sender in its ``User-Agent`` (:func:`user_agent`): the adapter and
its version, and, once the adapter joined a membership, the replica; the API server's audit
log records it, which is how "never two writers" is checked from outside.

Each call is also reported, by verb, resource and status, to the transport's
:class:`~pando_runtime.plugin.ApiObserver` (metrics, when the host instruments the
adapter) and logged on ``pando_runtime.kubernetes.transport``: DEBUG per call,
WARNING when the server throttles (429), fails (5xx) or does not answer. Neither
ever sees a body, a query's values or a header.

Long because :class:`KubeTransport` is one object: its requests, streams and exec sessions share
its counts, its token bucket, its limiters and its closed flag. The parts that stand alone are
already apart: the HTTP helpers (``_http``), the token bucket (``_ratelimit``), the exec
WebSocket (``_exec``).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, Self

import anyio
import anyio.to_thread
import attrs

from pando_runtime.plugin import NO_API_OBSERVER, ApiObserver

from .._log import logger
from ._errors import ApiError
from ._http import (
    ResponseStream,
    decode,
    describe_call,
    read_body,
    retry_after_of,
    user_agent,
)
from ._ratelimit import TokenBucket

if TYPE_CHECKING:
    import urllib3
    from kubernetes.client import ApiClient, Configuration

__all__ = ["ClusterEndpoint", "KubeTransport", "TransportStats"]

_LOG = logger("transport")

COORDINATION_QPS = 10.0
COORDINATION_BURST = 20
COORDINATION_THREADS = 2
"""The coordination lane's own rate and worker threads (see :meth:`KubeTransport.coordinating`):
a replica's lease round is two calls per retry period, a singleton's one more."""

JSON = "application/json"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


class _Rate(Protocol):
    @property
    def qps(self) -> float: ...
    @property
    def burst(self) -> int: ...


class ClusterEndpoint(Protocol):
    """What a transport needs of a cluster (a :class:`~pando_runtime_kubernetes.Cluster` has it).

    A protocol, so the transport below the cluster set never imports it back.
    """

    @property
    def name(self) -> str: ...
    @property
    def configuration(self) -> Configuration: ...
    @property
    def rate(self) -> _Rate: ...


@attrs.define
class _Counts:
    """The transport's running counts; only the transport changes them."""

    calls: int = 0
    calls_by_kind: Counter[str] = attrs.field(factory=Counter)
    probes: int = 0
    answers: int = 0
    retries: int = 0
    bytes_received: int = 0
    in_flight: int = 0
    open_watches: Counter[str] = attrs.field(factory=Counter)


@attrs.frozen(kw_only=True)
class TransportStats:
    """What a :class:`KubeTransport` has counted, at one instant.

    ``calls``: every request and opened stream (``calls_by_kind`` by method and kind);
    ``probes``: the cache's liveness probes (not in ``calls``); ``retries``: requests sent
    again after a 429; ``bytes_received``: response bodies and streams, decompressed;
    ``in_flight``: worker threads inside a request now; ``open_watches``: by resource.
    """

    calls: int
    calls_by_kind: dict[str, int]
    probes: int
    retries: int
    bytes_received: int
    in_flight: int
    open_watches: dict[str, int]


class KubeTransport:
    """Every API call of one adapter: counted, rate-limited, threaded, with timeouts.

    It works on its own copy of ``configuration``: several transports may share one.
    """

    def __init__(
        self,
        configuration: Configuration,
        *,
        qps: float = 50.0,
        burst: int = 100,
        max_threads: int = 16,
        max_streams: int = 16,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        cluster: str | None = None,
        rate_limit_wait: float = 10.0,
    ) -> None:
        # The client (configuration, authentication, parameters) is imported by the first
        # transport, not by the adapter's import: it is most of the adapter's start-up.
        from kubernetes.client import ApiClient  # noqa: PLC0415

        configuration = copy.deepcopy(configuration)
        configuration.connection_pool_maxsize = max_threads
        # No urllib3 retries: they would wait out a timeout up to four times over and retry a
        # 429 behind our back (sleeping a worker thread); this transport owns retries.
        configuration.retries = False
        self._client = ApiClient(configuration)
        # Long-lived streams get their own client and pool, so a watch never starves calls.
        stream_config = copy.deepcopy(configuration)
        stream_config.connection_pool_maxsize = max_streams
        self._stream_client = ApiClient(stream_config)
        self.identify(None)
        self.bucket = TokenBucket(qps, burst)
        self.limiter = anyio.CapacityLimiter(max_threads)
        self.stream_limiter = anyio.CapacityLimiter(max_streams)
        self.timeouts = (connect_timeout, read_timeout)
        self.rate_limit_wait = rate_limit_wait
        self._counts = _Counts()
        self._probing: contextvars.ContextVar[bool] = contextvars.ContextVar(
            "probing", default=False
        )
        # The coordination lane: its own token bucket and threads (see coordinating()).
        self._coordination = (
            TokenBucket(COORDINATION_QPS, COORDINATION_BURST),
            anyio.CapacityLimiter(COORDINATION_THREADS),
        )
        self._coordinating: contextvars.ContextVar[bool] = contextvars.ContextVar(
            "coordinating", default=False
        )
        self._received_lock = threading.Lock()
        self._closed = False
        self.cluster = cluster
        """The cluster's name, for logs (``None`` when not known)."""
        self.observer: ApiObserver = NO_API_OBSERVER
        """Where every call is reported (set by the session when the adapter is observed)."""

    @contextlib.contextmanager
    def coordinating(self) -> Iterator[None]:
        """Requests within the block take the coordination lane: its own bucket and threads.

        A replica's lease renewals must not wait behind its apps' writes: under load they did
        (a round took 0.7 s instead of 0.25 s, and failover ran past the lease), as client-go's
        leader election avoids by a client of its own. Counted as every other call.
        """
        token = self._coordinating.set(True)
        try:
            yield
        finally:
            self._coordinating.reset(token)

    def identify(self, replica: str | None) -> None:
        """Name ``replica`` (``None``: no replica) in the User-Agent of every later request."""
        for client in (self._client, self._stream_client):
            client.user_agent = user_agent(replica)

    # -- what it counted (read-only; :meth:`stats` for a snapshot of all of it) ---------------

    @property
    def calls(self) -> int:
        """Every API call made so far (requests and opened streams)."""
        return self._counts.calls

    @property
    def calls_by_kind(self) -> dict[str, int]:
        """API calls so far by method and kind (``"PATCH pods"``): a copy."""
        return dict(self._counts.calls_by_kind)

    @property
    def probes(self) -> int:
        """Liveness probes of the cache (``GET /readyz``), not in :attr:`calls`."""
        return self._counts.probes

    @property
    def answers(self) -> int:
        """Requests, probes and opened streams the API server answered (any status).

        Whether the server answers is learned from every call, not only the cache's probe.
        """
        return self._counts.answers

    @property
    def retries(self) -> int:
        """Requests sent again after a 429, as its ``Retry-After`` said."""
        return self._counts.retries

    @property
    def bytes_received(self) -> int:
        """Bytes of every response body and stream read so far (after decompression)."""
        return self._counts.bytes_received

    @property
    def in_flight(self) -> int:
        """Worker threads inside a request now (an abandoned read until its timeout ends it)."""
        return self._counts.in_flight

    @property
    def open_watches(self) -> dict[str, int]:
        """Watch streams open now, by resource: a copy."""
        return dict(self._counts.open_watches)

    def stats(self) -> TransportStats:
        """A snapshot of everything this transport counted, taken at once."""
        c = self._counts
        return TransportStats(
            calls=c.calls,
            calls_by_kind=dict(c.calls_by_kind),
            probes=c.probes,
            retries=c.retries,
            bytes_received=c.bytes_received,
            in_flight=c.in_flight,
            open_watches=dict(c.open_watches),
        )

    @classmethod
    def for_cluster(
        cls,
        cluster: ClusterEndpoint,
        *,
        max_threads: int = 16,
        max_streams: int = 16,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        rate_limit_wait: float = 10.0,
    ) -> Self:
        """A transport to ``cluster``, at the cluster's own API rate."""
        return cls(
            cluster.configuration,
            qps=cluster.rate.qps,
            burst=cluster.rate.burst,
            max_threads=max_threads,
            max_streams=max_streams,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            cluster=cluster.name,
            rate_limit_wait=rate_limit_wait,
        )

    def _prepare(
        self,
        client: ApiClient,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
    ) -> tuple[str, dict[str, str], Any]:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type or JSON
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        _, url, headers, body, _ = client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return url, headers, body

    def _count(self, method: str, path: str) -> None:
        self._counts.calls += 1
        parts = path.split("?", 1)[0].strip("/").split("/")
        # /api/v1/<plural>[/<name>] or /api/v1/namespaces/<ns>/<plural>[/<name>][/<sub>]
        start = 2 if parts[0] == "api" else 3
        rest = parts[start:] or parts[1:2]  # a group's discovery: its name
        if len(rest) >= 3 and rest[0] == "namespaces":  # noqa: PLR2004
            rest = rest[2:]
        self._counts.calls_by_kind[f"{method} {'/'.join(rest[:1] + rest[2:3])}"] += 1

    def _observed(
        self,
        call: tuple[str, str, str | None],
        started: float,
        status: int,
        retry_after: float | None = None,
    ) -> None:
        """Report one answered (or unanswered: 0) call to the observer and the log."""
        seconds = time.perf_counter() - started
        verb, resource, namespace = call
        self.observer.call(verb, resource, status, seconds)
        degraded = status in {0, 429} or status >= 500  # noqa: PLR2004
        if not (degraded or _LOG.isEnabledFor(logging.DEBUG)):
            return
        where = f" in {namespace}" if namespace else ""
        extra = {
            "cluster": self.cluster,
            "verb": verb,
            "resource": resource,
            "namespace": namespace,
            "status": status,
            "duration_s": seconds,
        }
        if status == 429:  # noqa: PLR2004
            _LOG.warning(
                "the API server throttled %s %s%s (429); it asks to retry after %s s",
                verb,
                resource,
                where,
                "?" if retry_after is None else f"{retry_after:g}",
                extra={**extra, "retry_after": retry_after},
            )
        elif degraded:
            _LOG.warning(
                "%s %s%s: %s after %.1f ms",
                verb,
                resource,
                where,
                f"the API server failed ({status})" if status else "no answer",
                seconds * 1000,
                extra=extra,
            )
        else:
            _LOG.debug(
                "%s %s%s: %d in %.1f ms", verb, resource, where, status, seconds * 1000, extra=extra
            )

    def _call(  # noqa: PLR0917 - anyio's run_sync passes positionals
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeout: tuple[float, float],
    ) -> tuple[int, dict[str, Any]]:
        import urllib3  # noqa: PLC0415 - loaded with the client, by __init__
        from kubernetes.client.exceptions import (  # noqa: PLC0415
            ApiException as ClientApiException,
        )

        url, headers, body = self._prepare(
            self._client, method, path, query=query, body=body, content_type=content_type
        )
        with self._received_lock:
            self._counts.in_flight += 1
        try:
            try:
                response = self._client.rest_client.request(  # type: ignore[no-untyped-call]
                    method, url, headers=headers, body=body, _request_timeout=timeout
                ).response
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise ApiError(0, f"{type(error).__name__}: {error}") from error
            except ClientApiException as error:  # the client's wrapping of a TLS failure
                raise ApiError(0, f"{error.reason}".replace("\n", ": ")) from error
            try:
                data = read_body(response)
            finally:
                response.release_conn()
        finally:
            with self._received_lock:
                self._counts.in_flight -= 1
        self._received(len(data))
        if not 200 <= response.status < 300:  # noqa: PLR2004
            raise ApiError(
                response.status, response.reason or "", decode(data), retry_after_of(response)
            )
        return response.status, decode(data)

    def _heard(self, status: int) -> None:
        if status:  # 0: no answer (refused, reset, timed out)
            self._counts.answers += 1

    def _received(self, size: int) -> None:
        with self._received_lock:  # worker threads add concurrently
            self._counts.bytes_received += size

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        read_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Make one API call and return its JSON body; raise :class:`ApiError` unless 2xx.

        A 429 (the API server's flow control rejected the request before running it, so a
        write is safe to send again) is waited out as its ``Retry-After`` says while the
        waits add up to at most ``rate_limit_wait`` seconds; then the 429 is raised.
        """
        waited = 0.0
        while True:
            try:
                return await self._request_once(
                    method, path, query, body, content_type, read_timeout
                )
            except ApiError as error:
                delay = error.retry_after
                throttled = error.status == 429  # noqa: PLR2004 - Too Many Requests
                if not throttled or delay is None or waited + delay > self.rate_limit_wait:
                    raise
            await anyio.sleep(delay)
            waited += delay
            self._counts.retries += 1

    async def _request_once(  # noqa: PLR0917 - request's parts, once
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        read_timeout: float | None,
    ) -> dict[str, Any]:
        if self._closed:
            raise ApiError(0, "the adapter is closed")
        bucket, limiter = (
            self._coordination if self._coordinating.get() else (self.bucket, self.limiter)
        )
        await bucket.acquire()
        # A liveness probe is counted apart, and not reported as an operation's call.
        probing = self._probing.get()
        if probing:
            self._counts.probes += 1
        else:
            self._count(method, path)
        timeout = (self.timeouts[0], read_timeout or self.timeouts[1])
        call = describe_call(method, path, query)
        started = time.perf_counter()
        try:
            # Reads may be abandoned on cancel (the timeout ends the thread); writes finish,
            # so that we never lose track of whether a write happened.
            status, answer = await anyio.to_thread.run_sync(
                self._call,
                method,
                path,
                query,
                body,
                content_type,
                timeout,
                limiter=limiter,
                abandon_on_cancel=method == "GET",
            )
        except ApiError as error:
            self._heard(error.status)
            if not probing:
                self._observed(call, started, error.status, error.retry_after)
            raise
        self._heard(status)
        if not probing:
            self._observed(call, started, status)
        return answer

    async def probe(self, timeout: float) -> None:  # noqa: ASYNC109 - the probe's own bound
        """Ask the API server whether it is ready (``GET /readyz``); raises :class:`ApiError`.

        Counted in :attr:`probes`, not in :attr:`calls`: a probe comes from the cache's
        silence, not from any operation, and must not blur what an operation costs.
        """
        token = self._probing.set(True)
        try:
            await self.request("GET", "/readyz", read_timeout=timeout)
        finally:
            self._probing.reset(token)

    async def get(self, path: str, **query: Any) -> dict[str, Any]:
        """GET ``path`` with ``query``."""
        return await self.request("GET", path, query=query)

    async def apply(self, path: str, body: Mapping[str, Any], field_manager: str) -> dict[str, Any]:
        """Server-side apply ``body`` at ``path`` (``.../<kind>/<name>``), forcing ownership."""
        return await self.request(
            "PATCH",
            path,
            body=body,
            content_type=APPLY_PATCH,
            query={"fieldManager": field_manager, "force": "true"},
        )

    def _open(
        self, path: str, query: Mapping[str, Any] | None, read_timeout: float
    ) -> urllib3.BaseHTTPResponse:
        import urllib3  # noqa: PLC0415 - with the first call, not the adapter's import

        url, headers, _ = self._prepare(
            self._stream_client, "GET", path, query=query, body=None, content_type=None
        )
        headers["Accept"] = "*/*"
        try:
            response = self._stream_client.rest_client.pool_manager.request(
                "GET",
                url,
                headers=headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=self.timeouts[0], read=read_timeout),
            )
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ApiError(0, f"{type(error).__name__}: {error}") from error
        if not 200 <= response.status < 300:  # noqa: PLR2004
            try:
                data = read_body(response)
            finally:
                response.release_conn()
            raise ApiError(
                response.status, response.reason or "", decode(data), retry_after_of(response)
            )
        return response

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, *, query: Mapping[str, Any] | None = None, read_timeout: float
    ) -> AsyncIterator[ResponseStream]:
        """Open a streaming GET (a watch or a followed log); closed when the block ends."""
        if self._closed:
            raise ApiError(0, "the adapter is closed")
        await self.bucket.acquire()
        self._count("STREAM", path)
        call = describe_call("GET", path, query)
        started = time.perf_counter()
        try:
            response = await anyio.to_thread.run_sync(
                self._open,
                path,
                query,
                read_timeout,
                limiter=self.stream_limiter,
                # A followed log's answer may wait for its first line (up to the read timeout):
                # cancelling must not; the thread ends by then and its response is dropped.
                abandon_on_cancel=True,
            )
        except ApiError as error:
            self._heard(error.status)
            self._observed(call, started, error.status, error.retry_after)
            raise
        self._heard(response.status)
        self._observed(call, started, response.status)
        watch = call[1] if call[0] == "watch" else None
        if watch:
            self._counts.open_watches[watch] += 1
        stream = ResponseStream(response, self.stream_limiter, self._received)
        try:
            yield stream
        finally:
            stream.close()
            if watch:
                self._counts.open_watches[watch] -= 1

    @property
    def configuration(self) -> Configuration:
        """A copy of the cluster's client configuration, for exec sessions' own clients.

        The WebSocket they open never retries, so the transport's no-retries setting does not
        matter there.
        """
        config: Configuration = copy.copy(self._client.configuration)
        return config

    @contextlib.asynccontextmanager
    async def exec(
        self, namespace: str, pod: str, container: str | None, request: Any
    ) -> AsyncIterator[Any]:
        """Open an exec session (a ``KubeExecSession``) in ``pod``; counted and rate-limited."""
        from ._exec import open_exec  # noqa: PLC0415 - the WebSocket stack, on the first exec

        if self._closed:
            raise ApiError(0, "the adapter is closed")
        await self.bucket.acquire()
        self._count("EXEC", f"/api/v1/namespaces/{namespace}/pods/{pod}/exec")
        call = ("connect", "pods/exec", namespace)
        started = time.perf_counter()
        connected = False
        try:
            async with open_exec(
                self.configuration, namespace, pod, container, request, limiter=self.stream_limiter
            ) as session:
                connected = True
                self._observed(call, started, 101)  # the WebSocket's Switching Protocols
                yield session
        except ApiError as error:
            if not connected:
                self._observed(call, started, error.status)
            raise

    def close(self) -> None:
        """Close both connection pools (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for client in (self._client, self._stream_client):
            with contextlib.suppress(Exception):
                client.rest_client.pool_manager.clear()
            with contextlib.suppress(Exception):
                client.close()  # type: ignore[no-untyped-call]
