"""A small client of the Docker Engine API over its Unix socket (the harness's own calls:
ping, image load and save, version). The adapter under test brings its own client."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

_CHUNK = 1 << 20


class DockerApiError(RuntimeError):
    """The engine answered an error status, or could not be reached."""


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket (the host name is only the ``Host`` header)."""

    def __init__(self, socket_path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self._socket_path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True)
class Response:
    """A whole answer: status, headers (lower-cased names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class DockerApi:
    """Calls to the engine listening on ``socket_path``."""

    socket_path: Path
    timeout: float = 60.0

    def request(
        self,
        method: str,
        path: str,
        body: bytes | Iterator[bytes] | None = None,
        headers: dict[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> Response:
        """Send one request; return the answer whatever its status (OSError if unreachable)."""
        conn = _UnixConnection(self.socket_path, self.timeout if timeout is None else timeout)
        try:
            head = dict(headers or {})
            if isinstance(body, Iterator):
                head.setdefault("Transfer-Encoding", "chunked")
                conn.request(method, path, body=body, headers=head, encode_chunked=True)
            else:
                conn.request(method, path, body=body, headers=head)
            answer = conn.getresponse()
            data = answer.read()
            names = {k.lower(): v for k, v in answer.getheaders()}
            return Response(answer.status, names, data)
        finally:
            conn.close()

    def checked(self, method: str, path: str, **kwargs: Any) -> Response:
        """:meth:`request`, raising :class:`DockerApiError` on a status of 400 or more."""
        try:
            answer = self.request(method, path, **kwargs)
        except OSError as exc:
            raise DockerApiError(f"{method} {path}: engine unreachable: {exc}") from exc
        if answer.status >= 400:
            text = answer.body.decode("utf-8", "replace").strip()
            raise DockerApiError(f"{method} {path}: {answer.status} {text}")
        return answer

    def ping(self) -> str | None:
        """The API version ``/_ping`` names, or None while the engine does not answer."""
        try:
            answer = self.request("GET", "/_ping", timeout=2.0)
        except OSError:
            return None
        if answer.status != 200 or answer.body != b"OK":
            return None
        return answer.headers.get("api-version")

    def version(self) -> dict[str, Any]:
        """``GET /version``: the engine's version, API version, kernel and the like."""
        found: dict[str, Any] = self.checked("GET", "/version").json()
        return found

    def load_image(self, archive: Path) -> list[str]:
        """``POST /images/load`` of a docker-archive tar; the references it loaded."""
        answer = self.checked(
            "POST",
            "/images/load?quiet=1",
            body=_read_chunks(archive),
            headers={"Content-Type": "application/x-tar"},
        )
        loaded: list[str] = []
        for line in answer.body.decode().splitlines():
            if not line.strip():
                continue
            message = json.loads(line)
            if "errorDetail" in message or "error" in message:
                detail = message.get("errorDetail", {}).get("message") or message.get("error")
                raise DockerApiError(f"loading {archive.name}: {detail}")
            stream = str(message.get("stream", ""))
            for prefix in ("Loaded image: ", "Loaded image ID: "):
                if stream.startswith(prefix):
                    loaded.append(stream[len(prefix) :].strip())
        return loaded

    def save_image(self, name: str, destination: Path) -> Path:
        """``GET /images/{name}/get``: the image as a docker-archive tar at ``destination``."""
        answer = self.checked("GET", f"/images/{quote(name, safe='')}/get")
        destination.write_bytes(answer.body)
        return destination

    def image_names(self) -> list[str]:
        """Every tag the engine holds."""
        images = self.checked("GET", "/images/json").json()
        return sorted(tag for image in images for tag in image.get("RepoTags") or ())


def _read_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk
