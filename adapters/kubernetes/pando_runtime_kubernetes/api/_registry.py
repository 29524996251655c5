"""A client of one image registry's distribution API, over urllib3 in worker threads.

As :class:`~pando_runtime_kubernetes.KubeTransport` does for the API server, every
call runs the blocking urllib3 request in a worker thread under the client's own
``CapacityLimiter``, with connect and read timeouts and no urllib3 retries, and is counted
(``calls``, ``calls_by_kind``, ``bytes_sent``). HTTPS only, verified against the system's trust
store or a CA bundle file. A blob's bytes are sent from the spooled archive with ``pread`` on a
descriptor of their own, so a cancelled import stops sending at the next block and never
reads a file descriptor number that was reused meanwhile.

Each call is logged on ``pando_runtime.kubernetes.images``: DEBUG when answered as expected,
WARNING when the registry could not be reached, refused the credentials, throttled or failed.
Never a header (the ``Authorization`` one holds the password), a body, nor the registry's
error messages (only its error codes).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from http import HTTPStatus
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlsplit

import anyio
import anyio.to_thread
import attrs

from .._log import logger
from ._image_archive import MANIFEST_TYPES, ArchiveBlob, ArchiveManifest

if TYPE_CHECKING:
    import urllib3

__all__ = ["BlobBody", "RegistryAnswer", "RegistryClient", "RegistryError"]

_LOG = logger("images")
_USER_AGENT = "pando-runtime-kubernetes"
_SEND_BLOCK = 1024 * 1024
_ANSWER_LIMIT = 4 * 1024 * 1024


class RegistryError(Exception):
    """A registry call failed: ``status`` is the HTTP status, 0 when nothing answered.

    ``codes`` are the registry's error codes (``BLOB_UNKNOWN``, ``DIGEST_INVALID``, ...);
    ``challenge`` its ``WWW-Authenticate`` header; ``kind`` what was asked.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        *,
        kind: str = "",
        codes: tuple[str, ...] = (),
        challenge: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.kind = kind
        self.codes = codes
        self.challenge = challenge
        self.retry_after = retry_after


class CaFileError(Exception):
    """The CA bundle file cannot be read (``reason`` says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.frozen
class RegistryAnswer:
    """An answer: status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    data: bytes = attrs.field(repr=False)


class BlobBody:
    """``size`` bytes at ``offset`` of a file, read with ``pread`` on a descriptor of its own.

    urllib3 reads it as a file. :meth:`abort` (from any thread) makes the next read fail, so a
    cancelled upload stops; the descriptor is closed when the request ends.
    """

    def __init__(self, fd: int, offset: int, size: int) -> None:
        self._fd = os.dup(fd)
        self._offset = offset
        self._left = size
        self._aborted = False
        self._lock = threading.Lock()
        self.sent = 0

    def read(self, amount: int = -1) -> bytes:
        """Up to ``amount`` bytes (all that is left when negative)."""
        if self._aborted:
            msg = "the upload was cancelled"
            raise OSError(msg)
        amount = self._left if amount < 0 else min(amount, self._left)
        if amount <= 0:
            return b""
        data = os.pread(self._fd, amount, self._offset)
        if not data:
            msg = "the spooled archive is shorter than its index says"
            raise OSError(msg)
        self._offset += len(data)
        self._left -= len(data)
        self.sent += len(data)
        return data

    def abort(self) -> None:
        """Make the next read fail (safe from any thread)."""
        self._aborted = True

    def close(self) -> None:
        """Close the descriptor (twice is fine)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _codes(data: bytes) -> tuple[str, ...]:
    try:
        errors = json.loads(data).get("errors") or []
        return tuple(str(e.get("code")) for e in errors if isinstance(e, dict) and e.get("code"))
    except (ValueError, AttributeError):
        return ()


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        value = headers.get("retry-after")
        return float(value) if value is not None else None
    except ValueError:
        return None


def _host_port(address: str) -> tuple[str, int]:
    """``registry.example:5000`` -> (``registry.example``, 5000); no port: 443."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        host, port = address, "443"
    return host.strip("[]"), int(port)


class RegistryClient:
    """The distribution API of the registry at ``address`` (``host:port``), over HTTPS."""

    def __init__(
        self,
        address: str,
        *,
        ca_file: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_threads: int = 4,
    ) -> None:
        import urllib3  # noqa: PLC0415 - with the first call, not the adapter's import

        self.address = address
        self._host, self._port = _host_port(address)
        self._ca_file = ca_file
        self._timeout = urllib3.Timeout(connect=connect_timeout, read=read_timeout)
        self._max_threads = max_threads
        self._pool: urllib3.HTTPSConnectionPool | None = None
        self._pool_lock = threading.Lock()
        self._closed = False
        self.limiter = anyio.CapacityLimiter(max_threads)
        self.calls = 0
        """Every call made so far."""
        self.calls_by_kind: Counter[str] = Counter()
        """Calls by what they asked (``blob HEAD``, ``blob PUT``, ``manifest PUT``...)."""
        self.bytes_sent = 0
        """Bytes of blobs and manifests sent so far."""

    def __repr__(self) -> str:
        return f"RegistryClient({self.address!r})"

    # -- transport --------------------------------------------------------------------------

    def _connections(self) -> urllib3.HTTPSConnectionPool:
        import ssl  # noqa: PLC0415 - with the first registry call, not the adapter's import

        import urllib3  # noqa: PLC0415

        with self._pool_lock:
            if self._pool is None:
                try:
                    context = ssl.create_default_context(cafile=self._ca_file)
                except (OSError, ssl.SSLError) as error:
                    raise CaFileError(str(error.strerror or error)) from None
                self._pool = urllib3.HTTPSConnectionPool(
                    self._host,
                    self._port,
                    ssl_context=context,
                    maxsize=self._max_threads,
                    retries=False,
                    timeout=self._timeout,
                    blocksize=_SEND_BLOCK,
                )
            return self._pool

    def _send(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | BlobBody | None
    ) -> RegistryAnswer:
        import urllib3  # noqa: PLC0415 - with the first call, not the adapter's import

        try:
            pool = self._connections()
            try:
                response = pool.urlopen(
                    method,
                    target,
                    body=cast("IO[bytes]", body) if isinstance(body, BlobBody) else body,
                    headers=dict(headers),
                    retries=False,
                    redirect=False,
                    timeout=self._timeout,
                    preload_content=False,
                )
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise RegistryError(0, f"{type(error).__name__}: {error}") from None
            try:
                data = response.read(_ANSWER_LIMIT) if method != "HEAD" else b""
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise RegistryError(0, f"{type(error).__name__} reading the answer") from None
            finally:
                response.drain_conn()
                response.release_conn()
            return RegistryAnswer(
                response.status, {k.lower(): v for k, v in response.headers.items()}, data
            )
        finally:
            if isinstance(body, BlobBody):
                body.close()

    async def call(
        self,
        method: str,
        target: str,
        *,
        kind: str,
        expect: tuple[int, ...],
        auth: str | None,
        headers: Mapping[str, str] | None = None,
        body: bytes | BlobBody | None = None,
    ) -> RegistryAnswer:
        """One call; an answer whose status is not in ``expect`` is a :class:`RegistryError`.

        ``auth`` is the ``Authorization`` header's value (never logged).
        """
        if self._closed:
            raise RegistryError(0, "the adapter is closed", kind=kind)
        sent = {"User-Agent": _USER_AGENT, **(headers or {})}
        if auth is not None:
            sent["Authorization"] = auth
        self.calls += 1
        self.calls_by_kind[kind] += 1
        started = time.perf_counter()
        try:
            answer = await anyio.to_thread.run_sync(
                self._send, method, target, sent, body, limiter=self.limiter, abandon_on_cancel=True
            )
        except RegistryError as error:
            error.kind = kind
            self._logged(kind, 0, started)
            raise
        except BaseException:
            if isinstance(body, BlobBody):
                body.abort()  # an abandoned upload stops at its next block
            raise
        self._logged(kind, answer.status, started)
        if isinstance(body, BlobBody):
            self.bytes_sent += body.sent
        elif body is not None:
            self.bytes_sent += len(body)
        if answer.status not in expect:
            raise RegistryError(
                answer.status,
                _phrase(answer.status),
                kind=kind,
                codes=_codes(answer.data),
                challenge=answer.headers.get("www-authenticate"),
                retry_after=_retry_after(answer.headers),
            )
        return answer

    def _logged(self, kind: str, status: int, started: float) -> None:
        seconds = time.perf_counter() - started
        degraded = status in {0, 401, 403, 429} or status >= 500  # noqa: PLR2004
        if not (degraded or _LOG.isEnabledFor(logging.DEBUG)):
            return
        extra: dict[str, Any] = {
            "registry": self.address,
            "kind": kind,
            "status": status,
            "duration_s": seconds,
        }
        _LOG.log(
            logging.WARNING if degraded else logging.DEBUG,
            "registry %s: %s: %s in %.1f ms",
            self.address,
            kind,
            status or "no answer",
            seconds * 1000,
            extra=extra,
        )

    def close(self) -> None:
        """Close the connection pool (idempotent); later calls fail."""
        self._closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # -- the distribution API ------------------------------------------------------------------

    async def manifest_exists(self, repository: str, reference: str, auth: str | None) -> bool:
        """Whether ``repository`` has a manifest under ``reference`` (a tag or a digest)."""
        answer = await self.call(
            "HEAD",
            f"/v2/{repository}/manifests/{quote(reference, safe=':')}",
            kind="manifest HEAD",
            expect=(200, 404),
            auth=auth,
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        return answer.status == HTTPStatus.OK

    async def blob_exists(self, repository: str, digest: str, auth: str | None) -> bool:
        """Whether ``repository`` has the blob ``digest``."""
        answer = await self.call(
            "HEAD",
            f"/v2/{repository}/blobs/{digest}",
            kind="blob HEAD",
            expect=(200, 404),
            auth=auth,
        )
        return answer.status == HTTPStatus.OK

    async def upload(self, repository: str, blob: ArchiveBlob, fd: int, auth: str | None) -> None:
        """Upload a blob whole: a ``POST`` opens the upload, one ``PUT`` sends the bytes."""
        opened = await self.call(
            "POST",
            f"/v2/{repository}/blobs/uploads/",
            kind="upload POST",
            expect=(202,),
            auth=auth,
            headers={"Content-Length": "0"},
        )
        target = self._upload_target(opened.headers.get("location", ""), blob.digest)
        await self.call(
            "PUT",
            target,
            kind="blob PUT",
            expect=(201, 204),
            auth=auth,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(blob.size)},
            body=BlobBody(fd, blob.offset, blob.size),
        )

    def _upload_target(self, location: str, digest: str) -> str:
        """The upload's path and query, with the digest; never another host."""
        parts = urlsplit(location)
        if not parts.path.startswith("/v2/"):
            raise RegistryError(0, "the registry gave no upload location", kind="upload POST")
        if (parts.netloc and parts.netloc.lower() != self.address.lower()) or (
            parts.scheme not in {"", "https"}
        ):
            raise RegistryError(
                0,
                f"the registry sent the upload to {parts.scheme}://{parts.netloc}, another "
                "address (the credentials are sent to the registry's own only)",
                kind="upload POST",
            )
        query = "&".join(q for q in (parts.query, f"digest={quote(digest)}") if q)
        return f"{parts.path}?{query}"

    async def put_manifest(
        self, repository: str, manifest: ArchiveManifest, auth: str | None
    ) -> str | None:
        """Put a manifest under its digest; the digest the registry says it stored."""
        answer = await self.call(
            "PUT",
            f"/v2/{repository}/manifests/{manifest.digest}",
            kind="manifest PUT",
            expect=(201, 200),
            auth=auth,
            headers={"Content-Type": manifest.media_type},
            body=manifest.data,
        )
        return answer.headers.get("docker-content-digest")
