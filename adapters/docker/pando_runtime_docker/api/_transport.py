"""Every Engine API call of one adapter: counted, versioned, with timeouts, on anyio.

A thin layer over ``httpx`` (over :mod:`._unix`'s connections for a unix socket, an SSH
tunnel's included, and its TLS for ``tcp://``): it runs natively on asyncio and trio, so a
cancelled call is really cancelled, a followed stream has no read timeout, and an exec's
stdin can be half-closed (see ``docs/docker.md``). Where it connects is the
:class:`~..endpoint.EngineLink`'s, which also explains a failed connection (TLS, ssh). The
API version is negotiated with the daemon on first use (``GET /_ping``, which also tells a
Docker Engine from another server) and prefixed to every route. Each call is counted by
method and route template (``calls_by_kind``), for tests and benchmarks; the cache's probes apart
(``probes``). Whether the daemon answers is :class:`~._answering.Answering`'s: while it does
not, every call fails at once.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

import anyio
import attrs
import httpx

from pando_runtime import AdapterUnavailable, PandoRuntimeError

from .._log import logger
from ..endpoint import EngineLink, refused
from ._answering import Answering, not_answering
from ._errors import EngineError, unreachable
from ._hijack import HijackedStream
from ._unix import unix_transport
from ._version import negotiate_version

__all__ = ["EngineTransport", "TransportStats"]

_LOG = logger("transport")


@attrs.frozen(kw_only=True)
class TransportStats:
    """What a transport has counted, at one instant.

    ``calls``: every request, opened stream and upgrade (``calls_by_kind`` by method and
    route template, ``GET /containers/{id}/json`` say); ``writes``: those that are not
    ``GET`` or ``HEAD``; ``probes``: the cache's probes (``GET /_ping``), not in ``calls``.
    """

    calls: int
    writes: int
    calls_by_kind: dict[str, int]
    probes: int = 0


class EngineTransport:
    """The adapter's one door to a daemon."""

    def __init__(
        self,
        link: EngineLink,
        *,
        connect_timeout: float,
        read_timeout: float,
        answer_timeout: float,
    ) -> None:
        self.link = link
        self.host = link.host
        self.answering = Answering(link.host, answer_timeout)
        """Whether the daemon answers: while it does not, every call fails at once."""
        self._probes = 0
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._connect_timeout = connect_timeout
        self._client: httpx.AsyncClient | None = None
        self._version: str | None = None
        self._version_lock: anyio.Lock | None = None
        self._calls: Counter[str] = Counter()

    # -- bookkeeping -------------------------------------------------------------------------

    @property
    def stats(self) -> TransportStats:
        """The counts now."""
        kinds = dict(self._calls)
        writes = sum(n for kind, n in kinds.items() if not kind.startswith(("GET ", "HEAD ")))
        return TransportStats(
            calls=sum(kinds.values()), writes=writes, calls_by_kind=kinds, probes=self._probes
        )

    def _new_client(self, timeout: httpx.Timeout | None = None) -> httpx.AsyncClient:
        link = self.link
        transport = (
            unix_transport(link.uds, link.ssl_context)
            if link.uds is not None
            else httpx.AsyncHTTPTransport(verify=link.ssl_context, retries=0, trust_env=False)
        )
        return httpx.AsyncClient(
            transport=transport,
            base_url=link.base_url,
            timeout=timeout or self._timeout,
            trust_env=False,  # no proxy, .netrc or CA bundle from the environment
        )

    def _shared(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = self._new_client()
        return self._client

    async def aclose(self) -> None:
        """Close the shared connections (and an SSH tunnel). Safe to call twice."""
        client, self._client = self._client, None
        try:
            if client is not None:
                await client.aclose()
        finally:
            await self.link.aclose()

    # -- version -------------------------------------------------------------------------------

    async def ping(self) -> str | None:
        """``GET /_ping``: the daemon is there; returns the API version it names.

        A Docker Engine (and Podman) answers ``OK``; any other answer is another server.
        """
        response = await self._send("GET", "/_ping", "/_ping")
        if response.status_code >= 500:  # noqa: PLR2004 - HTTP status: the engine failed
            raise EngineError(response.status_code, "GET /_ping", response.text)
        if response.status_code != 200 or response.text.strip() != "OK":  # noqa: PLR2004
            raise _not_an_engine(self.host, response)
        version: str | None = response.headers.get("API-Version")
        return version

    async def answers_now(self) -> None:
        """``GET /_ping`` within the answer timeout; raises ``AdapterUnavailable`` when it fails.

        No answer in time marks the daemon silent (:attr:`answering`: every call fails at once
        until a probe is answered); a refused connection raises as any call's would. Counted
        in ``probes``, not ``calls``; asked even while the daemon is silent.
        """
        answering = self.answering
        try:
            with anyio.fail_after(answering.timeout):
                await self._send(
                    "GET", "/_ping", "/_ping", probe=True, timeout=httpx.Timeout(answering.timeout)
                )
        except TimeoutError:
            answering.unanswered()
            raise answering.error() from None
        except AdapterUnavailable as error:
            if isinstance(error.__cause__, httpx.TimeoutException):
                answering.unanswered()
                raise answering.error() from error
            raise

    async def probe(self) -> bool:
        """:meth:`answers_now`, as a bool: whether the daemon answered."""
        try:
            await self.answers_now()
        except PandoRuntimeError:
            return False
        return True

    async def version(self) -> str:
        """The API version spoken with this daemon (negotiated once)."""
        if self._version is None:
            if self._version_lock is None:
                self._version_lock = anyio.Lock()
            async with self._version_lock:
                if self._version is None:
                    self._version = negotiate_version(await self.ping(), host=self.host)
                    _LOG.info("speaking Engine API %s with %s", self._version, self.host)
        return self._version

    async def _path(self, template: str, args: Mapping[str, str]) -> str:
        path = template.format(**{k: quote(v, safe="") for k, v in args.items()})
        return f"/v{await self.version()}{path}"

    # -- requests ------------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        template: str,
        url: str,
        *,
        client: httpx.AsyncClient | None = None,
        stream: bool = False,
        probe: bool = False,
        **kwargs: Any,
    ) -> httpx.Response:
        kind = f"{method} {template}"
        if probe:
            self._probes += 1
        else:
            self._calls[kind] += 1
        client = client or self._shared()
        request = client.build_request(method, url, **kwargs)
        started = time.monotonic()
        # A call is cut short if the daemon stops answering; the probe is what finds it out.
        bound = contextlib.nullcontext() if probe else self.answering.bounded()
        try:
            with bound:
                await self.link.ready()
                response = await client.send(request, stream=stream)
        except httpx.ReadTimeout as error:
            raise not_answering(self.host, time.monotonic() - started) from error
        except httpx.TimeoutException as error:
            raise self.link.explain(error) or unreachable(self.host, f"{kind} timed out") from error
        except (httpx.TransportError, OSError) as error:
            raise self.link.explain(error) or unreachable(self.host, _cause(error)) from error
        self.answering.answered()
        _LOG.debug(
            "%s -> %s",
            kind,
            response.status_code,
            extra={
                "route": kind,
                "status": response.status_code,
                "duration_s": time.monotonic() - started,
            },
        )
        return response

    async def request(
        self,
        method: str,
        template: str,
        *,
        args: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content: bytes | AsyncIterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201, 204, 304),
    ) -> httpx.Response:
        """Send one request and read its answer; raise :class:`EngineError` unless ``ok``."""
        url = await self._path(template, args or {})
        kwargs: dict[str, Any] = {"params": _params(params), "headers": dict(headers or {})}
        if body is not None:
            kwargs["json"] = body
        elif content is not None:
            kwargs["content"] = content
        response = await self._send(method, template, url, **kwargs)
        if response.status_code not in ok:
            raise EngineError(response.status_code, f"{method} {template}", _message(response))
        return response

    async def get_json(
        self,
        template: str,
        *,
        args: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """``GET`` a JSON answer."""
        return (await self.request("GET", template, args=args, params=params)).json()

    async def put_archive(self, container: str, archive: bytes) -> None:
        """Extract a tar ``archive`` into ``container`` at ``/`` (before it starts, say)."""
        await self.request(
            "PUT",
            "/containers/{id}/archive",
            args={"id": container},
            params={"path": "/"},
            content=archive,
            headers={"Content-Type": "application/x-tar"},
        )

    async def remove_container(self, container: str) -> None:
        """Remove ``container`` (killed if it runs) and its anonymous volumes.

        One already gone is no error; any other refusal raises ``EngineError``.
        """
        try:
            await self.request(
                "DELETE",
                "/containers/{id}",
                args={"id": container},
                params={"force": True, "v": True},
            )
        except EngineError as error:
            if not error.not_found:
                raise

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        template: str,
        *,
        args: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        follow: bool = False,
    ) -> AsyncIterator[httpx.Response]:
        """A response whose body is read as it arrives (no read timeout when ``follow``)."""
        url = await self._path(template, args or {})
        client = self._new_client(httpx.Timeout(None, connect=self._connect_timeout))
        try:
            timeout = httpx.Timeout(None, connect=self._connect_timeout) if follow else None
            kwargs: dict[str, Any] = {"params": _params(params), "headers": dict(headers or {})}
            if timeout is not None:
                kwargs["timeout"] = timeout
            else:
                kwargs["timeout"] = self._timeout
            response = await self._send(method, template, url, client=client, stream=True, **kwargs)
            try:
                if response.status_code != 200:  # noqa: PLR2004 - HTTP status
                    await response.aread()
                    raise EngineError(
                        response.status_code, f"{method} {template}", _message(response)
                    )
                yield response
            finally:
                await response.aclose()
        finally:
            await client.aclose()

    async def upgrade(
        self,
        template: str,
        *,
        args: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> HijackedStream:
        """``POST`` asking the daemon to hijack the connection; the raw stream it leaves.

        Without ``body`` the request has none: the daemon does not read an attach request's
        body, so any bytes of it would reach the container's stdin.
        """
        url = await self._path(template, args or {})
        payload: dict[str, Any] = {"content": b""} if body is None else {"json": body}
        client = self._new_client(httpx.Timeout(None, connect=self._connect_timeout))
        try:
            response = await self._send(
                "POST",
                template,
                url,
                client=client,
                stream=True,
                params=_params(params),
                **payload,
                headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            )
            if response.status_code != 101 or "network_stream" not in response.extensions:  # noqa: PLR2004
                await response.aread()
                await response.aclose()
                raise EngineError(  # noqa: TRY301 - the client is closed by the handler below
                    response.status_code, f"POST {template}", _message(response)
                )
        except BaseException:
            await client.aclose()
            raise
        return HijackedStream(client, response)


def _params(params: Mapping[str, Any] | None) -> dict[str, str]:
    """Query parameters as the Engine reads them: booleans as 1/0, mappings as JSON."""
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "1" if value else "0"
        elif isinstance(value, dict | list):
            out[key] = json.dumps(value, separators=(",", ":"))
        else:
            out[key] = str(value)
    return out


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return response.text.strip()


def _not_an_engine(host: str, response: httpx.Response) -> Exception:
    server = response.headers.get("Server", "")[:80]
    if "HTTP request to an HTTPS server" in response.text:
        return refused(
            host,
            "tls_required",
            "it speaks TLS (it answered plain HTTP with 'an HTTP request to an HTTPS server')",
            "Give its TLS material (tls_ca, tls_cert, tls_key, or DOCKER_CERT_PATH).",
            status=response.status_code,
        )
    return refused(
        host,
        "not_docker",
        f"the server there is not a Docker Engine (GET /_ping answered {response.status_code}"
        f"{', server ' + server if server else ''}, not OK)",
        "Point the host setting (or the context) at a Docker Engine's API.",
        status=response.status_code,
        server=server,
    )


def _cause(error: BaseException) -> str:
    """A short reason from a connection error: the OS error's words, never a body."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, FileNotFoundError):
            return "no socket at that path"
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        if isinstance(current, PermissionError):
            return "permission denied on the socket"
        current = current.__cause__ or current.__context__
    text = str(error).lower()
    if "no such file" in text:
        return "no socket at that path"
    if "refused" in text:
        return "connection refused"
    return type(error).__name__
