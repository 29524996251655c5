"""Service-account tokens through the TokenRequest API, and acting as a service account.

A token is what ``kubectl create token`` makes: a short-lived, audience-bound
JWT signed by the API server for one service account, created by
``POST .../serviceaccounts/<name>/token``. It is never logged and never part of
a ``repr`` or an exception message.

*Acting as a service account* (``Cluster.run_as``) uses such a token, requested
for the API server's own audience and requested again once 80 % of its life has
passed (as the kubelet refreshes projected tokens), rather than impersonation:

- the caller needs only ``create`` on ``serviceaccounts/token`` for that one
  account, where impersonation needs the ``impersonate`` verb, which grants
  acting as *any* user, group or account it names unless carefully scoped;
- every call is then authorised as the account itself, so what works under
  ``run_as`` works the same when the account's own pod makes it;
- the token plugs into the client's configuration as any bearer token does
  (the client's ``refresh_api_key_hook``, also used for exec plugins), so every
  call made through that configuration, watches and exec included, carries it.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._log import logger
from ._errors import ApiError

if TYPE_CHECKING:
    from kubernetes.client import Configuration

__all__ = ["MIN_TTL", "RequestedToken", "ServiceAccountToken", "acting_as", "request_token"]

log = logger("tokens")

MIN_TTL = 600
"""The shortest lifetime the API server grants a requested token (seconds)."""
REFRESH_AT = 0.8
"""Share of a token's lifetime after which a new one is requested."""
RETRY_REFRESH = 10.0
"""Seconds between refresh attempts while a still-valid token cannot be renewed."""
TIMEOUTS = (5.0, 30.0)
REQUEST_PATH = "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
"""Where a service account's tokens are requested (the TokenRequest subresource)."""
JSON = "application/json"


@attrs.frozen(repr=False)
class ServiceAccountToken:
    """A token for one service account: ``token`` is the secret; the rest is not."""

    token: str
    expires_at: dt.datetime
    """When the API server says the token expires (UTC)."""
    audiences: tuple[str, ...]
    """The audiences it is valid for (empty: the API server's own)."""
    namespace: str
    service_account: str

    def __repr__(self) -> str:
        return (
            f"ServiceAccountToken({self.namespace}/{self.service_account}, "
            f"audiences={list(self.audiences)}, expires_at={self.expires_at.isoformat()})"
        )

    __str__ = __repr__


def _message(body: str | bytes | None) -> str:
    try:
        data = json.loads(body or b"")
    except ValueError:
        return ""
    return str(data.get("message", "")) if isinstance(data, dict) else ""


def request_token(
    configuration: Configuration,
    *,
    namespace: str,
    service_account: str,
    audiences: Sequence[str] = (),
    ttl: int = 3600,
) -> ServiceAccountToken:
    """Request a token (blocking: run it in a worker thread); raise :class:`ApiError`.

    The error names the account and the API server's reason, never a token.
    """
    # A plain JSON body through the client's serialiser and pool (its authentication and TLS):
    # the generated API class and models would cost more to import than the whole request.
    import urllib3  # noqa: PLC0415
    from kubernetes.client import ApiClient  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": list(audiences), "expirationSeconds": int(ttl)},
    }
    what = f"token request for service account {namespace}/{service_account}"
    try:
        with ApiClient(configuration) as api:
            _, url, headers, payload, _ = api.param_serialize(
                method="POST",
                resource_path=REQUEST_PATH,
                path_params={"namespace": namespace, "name": service_account},
                header_params={"Accept": JSON, "Content-Type": JSON},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = api.rest_client.request(
                "POST", url, headers=headers, body=payload, _request_timeout=TIMEOUTS
            )
            data = response.read()
    except ApiException as error:  # the client's wrapping of a TLS failure
        reason = _message(error.body) or str(error.reason or "")
        raise ApiError(0, f"{what} failed: {reason}", {"message": reason}) from None
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise ApiError(0, f"{what} failed: {type(error).__name__}: {error}") from None
    if not 200 <= response.status < 300:  # noqa: PLR2004
        reason = _message(data) or str(response.reason or "")
        raise ApiError(response.status, f"{what} failed: {reason}", {"message": reason})
    answer: dict[str, Any] = json.loads(data)
    granted: dict[str, Any] = answer.get("status") or {}
    expires = dt.datetime.fromisoformat(granted["expirationTimestamp"])
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=dt.UTC)
    spec: dict[str, Any] = answer.get("spec") or {}
    return ServiceAccountToken(
        token=granted["token"],
        expires_at=expires,
        audiences=tuple(spec.get("audiences") or ()),
        namespace=namespace,
        service_account=service_account,
    )


class RequestedToken:
    """The current token of one service account, requested again before it expires.

    Thread-safe: every worker thread of every transport built on the same
    configuration shares one token and one refresh.
    """

    def __init__(
        self,
        base: Configuration,
        namespace: str,
        service_account: str,
        *,
        ttl: int = 3600,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base = base
        self.namespace = namespace
        self.service_account = service_account
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._token: ServiceAccountToken | None = None
        self._refresh_at = 0.0
        self._expires_at = 0.0
        self.requests = 0
        """Tokens requested so far."""

    def _renew(self) -> ServiceAccountToken:
        now = self._clock()
        self.requests += 1
        token = request_token(
            self._base,
            namespace=self.namespace,
            service_account=self.service_account,
            ttl=self._ttl,
        )
        lifetime = max(0.0, token.expires_at.timestamp() - time.time())
        self._token = token
        self._refresh_at = now + REFRESH_AT * lifetime
        self._expires_at = now + lifetime
        return token

    def current(self) -> ServiceAccountToken:
        """The token to send now; requests a new one when due (blocking)."""
        with self._lock:
            token = self._token
            if token is None or self._clock() >= self._refresh_at:
                try:
                    token = self._renew()
                except ApiError as error:
                    if token is None or self._clock() >= self._expires_at:
                        raise
                    # The old token is still valid: keep it, retry a little later.
                    log.warning(
                        "cannot renew the token of %s/%s yet (%s); retrying in %.0f s",
                        self.namespace,
                        self.service_account,
                        error.reason,
                        RETRY_REFRESH,
                    )
                    self._refresh_at = self._clock() + RETRY_REFRESH
            return token

    def refresh_hook(self, configuration: Configuration) -> None:
        """The client's ``refresh_api_key_hook``: called before every request is sent."""
        configuration.api_key["BearerToken"] = f"Bearer {self.current().token}"


def acting_as(base: Configuration, source: RequestedToken) -> Configuration:
    """A copy of ``base`` (server, TLS, proxy) that authenticates only with ``source``.

    The base's own credentials (client certificate, token, exec plugin hook,
    basic auth) are dropped: the API server would otherwise authenticate the
    certificate first. Requests the first token now (blocking).
    """
    configuration = copy.deepcopy(base)
    configuration.cert_file = None
    configuration.key_file = None
    configuration.username = None
    configuration.password = None
    configuration.api_key = {}
    configuration.api_key_prefix = {}

    def refresh(configuration: Configuration) -> None:
        # A plain function, not a bound method: copies of the configuration share it.
        source.refresh_hook(configuration)

    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
    refresh(configuration)
    return configuration
