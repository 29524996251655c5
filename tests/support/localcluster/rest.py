"""A tiny JSON-over-HTTPS client for the harness's own API calls (no third-party deps)."""

from __future__ import annotations

import http.client
import json
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class Rest:
    """Talks to one API server with a client certificate."""

    def __init__(self, server: str, ca_cert: Path, client_cert: Path, client_key: Path) -> None:
        parts = urlsplit(server)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 443
        self.context = ssl.create_default_context(cafile=str(ca_cert))
        self.context.load_cert_chain(str(client_cert), str(client_key))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """Send a request; return (HTTP status, decoded JSON body or text or None).

        Connection errors are returned as status 0 with the error text, so that callers
        polling for readiness need no exception handling.
        """
        conn = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=timeout
        )
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            raw = resp.read().decode("utf-8", "replace")
            status = resp.status
        except (OSError, http.client.HTTPException) as exc:
            return 0, str(exc)
        finally:
            conn.close()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw

    def get(self, path: str) -> tuple[int, Any]:
        """GET ``path``."""
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        """POST a JSON body to ``path``."""
        return self.request("POST", path, body)
