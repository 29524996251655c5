"""The etcd lease store: a key per lease, transactions on ``mod_revision``, linearizable reads.

Everything goes through etcd's HTTP/JSON gateway (``POST /v3/kv/range``, ``/v3/kv/txn``;
keys and values base64, 64-bit numbers as strings) with httpx, so no gRPC client is needed
and the store runs on asyncio and trio. A version is the key's ``mod_revision``: etcd's
revision is global and never reused, so a re-created lease never carries an old version.
No etcd lease (TTL) is attached to a key: expiry is the membership's, never the store's.

Over ``https`` the TLS context comes from the settings (``tls_ca``, ``tls_cert``,
``tls_key``), loaded when the store is made. With etcd's authentication on, the store asks
for a token with ``username`` and ``password`` before its first call, sends it in each
call's ``Authorization`` header, and asks again once when etcd answers that the token is no
longer valid (a simple token lives ``--auth-token-ttl`` seconds unused; a JWT until it
expires). Neither the password nor the token is in any message or log.
"""

from __future__ import annotations

import base64
from http import HTTPStatus
from typing import Any, Self

import anyio
import httpx

from pando_runtime import AdapterFailed, AdapterUnavailable
from pando_runtime.plugin import (
    LeaseConflict,
    LeaseRecord,
    StoredLease,
    decode_lease_record,
    encode_lease_record,
    https_verify,
    tls_failure_message,
)

from ._info import EtcdLeaseConfig

__all__ = ["EtcdLeaseStore", "etcd_lease_store"]

_UNREACHABLE = "Check the store's 'address' and that etcd is up with a leader."
_TLS_REMEDY = (
    "Check 'tls_ca' (the CA that signed etcd's certificate, which must name the address "
    "dialled), and 'tls_cert' and 'tls_key' when etcd requires a client certificate "
    "(--client-cert-auth: one of the CA in its --trusted-ca-file)."
)
_NO_USER = ("etcdserver: user name is empty", "etcdserver: invalid auth token")
"""etcd's answers to a call without a valid token while its authentication is on."""
_CN_REFUSED = "CommonName of client"
"""etcd's gateway, with authentication on, refuses a client certificate naming a CommonName
(it would not be the identity used): its answer starts so."""


def etcd_lease_store(config: EtcdLeaseConfig) -> EtcdLeaseStore:
    """The factory ``load_lease_store("etcd", ...)`` calls."""
    return EtcdLeaseStore(config)


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _range_end(prefix: str) -> str:
    """The end of the range of every key starting with ``prefix`` (its last byte plus one)."""
    raw = prefix.encode()
    return _b64(raw[:-1] + bytes([raw[-1] + 1]))


class EtcdLeaseStore:
    """A :class:`~pando_runtime.plugin.LeaseStoreClient` over etcd v3's HTTP/JSON gateway.

    One call per read, one transaction per write. A call that gets no answer within
    ``timeout`` seconds (etcd stopped, frozen, without a leader) is
    :class:`~pando_runtime.AdapterUnavailable`.
    """

    def __init__(self, config: EtcdLeaseConfig) -> None:
        self.config = config
        self._client = httpx.AsyncClient(
            base_url=config.address.rstrip("/"),
            timeout=config.timeout,
            verify=https_verify(config, "etcd lease store"),
        )
        self._token: str | None = None
        self._authenticating = anyio.Lock()
        self.authentications = 0
        """Tokens asked for so far (one, then one each time etcd dropped the last)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections (the keys stay)."""
        await self._client.aclose()

    def _key(self, group: str, name: str = "") -> str:
        return f"{self.config.prefix}{group}/{name}"

    async def _send(self, what: str, path: str, body: dict[str, Any], token: str | None) -> Any:
        headers = {"Authorization": token} if token is not None else None
        try:
            return await self._client.post(path, json=body, headers=headers)
        except httpx.HTTPError as error:
            said = tls_failure_message(error)
            if said is not None:  # a setting's, not an outage: retrying changes nothing
                raise AdapterFailed(
                    f"{what}: TLS with etcd at {self.config.address} failed: {said}",
                    remedy=_TLS_REMEDY,
                    details={"store": "etcd", "cause": "tls_handshake", "tls": said},
                ) from None
            msg = f"{what}: etcd at {self.config.address} did not answer: {type(error).__name__}"
            remedy = _UNREACHABLE
            if self.config.address.startswith("https:") and self.config.tls_cert is None:
                # under TLS 1.3 an etcd that requires a client certificate just closes
                remedy += " If etcd requires client certificates, give 'tls_cert' and 'tls_key'."
            raise AdapterUnavailable(msg, remedy=remedy, details={"store": "etcd"}) from None

    async def _post(self, what: str, path: str, body: dict[str, Any], *, write: bool) -> Any:
        token = await self._authenticated(what, renew=False)
        response = await self._send(what, path, body, token)
        if response.status_code == HTTPStatus.UNAUTHORIZED and token is not None:
            # the token expired or etcd restarted: one new token, and the call again
            token = await self._authenticated(what, renew=True, stale=token)
            response = await self._send(what, path, body, token)
        if response.status_code != HTTPStatus.OK:
            raise _refused(what, response, write=write)
        return response.json()

    async def _authenticated(
        self, what: str, *, renew: bool, stale: str | None = None
    ) -> str | None:
        """The token calls carry (``None`` without a username), asked for once.

        Asked again when ``renew``, unless another call has replaced ``stale`` meanwhile.
        """
        username, password = self.config.username, self.config.password
        if username is None or password is None:
            return None
        async with self._authenticating:
            if self._token is not None and not (renew and self._token == stale):
                return self._token
            body = {"name": username, "password": password}
            response = await self._send(what, "/v3/auth/authenticate", body, None)
            if response.status_code != HTTPStatus.OK:
                raise _refused(what, response, write=False, user=username)
            self.authentications += 1
            self._token = str(response.json()["token"])
            return self._token

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        prefix = self._key(group)
        body = {"key": _b64(prefix), "range_end": _range_end(prefix)}  # linearizable: the default
        answer = await self._post(f"list the {group} leases", "/v3/kv/range", body, write=False)
        leases = []
        for kv in answer.get("kvs") or ():
            name = base64.b64decode(kv["key"]).decode()[len(prefix) :]
            record = decode_lease_record(base64.b64decode(kv.get("value", "")))
            if record is not None and "/" not in name:
                leases.append(StoredLease(name=name, record=record, version=kv["mod_revision"]))
        return tuple(sorted(leases, key=lambda lease: lease.name))

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        body = {"key": _b64(self._key(group, name))}  # one key, linearizable: the default
        answer = await self._post(f"read the lease of {name!r}", "/v3/kv/range", body, write=False)
        for kv in answer.get("kvs") or ():
            record = decode_lease_record(base64.b64decode(kv.get("value", "")))
            if record is not None:
                return StoredLease(name=name, record=record, version=kv["mod_revision"])
        return None

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        key = _b64(self._key(group, name))
        compare = (
            {"target": "CREATE", "key": key, "result": "EQUAL", "create_revision": "0"}
            if version is None
            else {"target": "MOD", "key": key, "result": "EQUAL", "mod_revision": version}
        )
        txn = {
            "compare": [compare],
            "success": [{"request_put": {"key": key, "value": _b64(encode_lease_record(record))}}],
        }
        answer = await self._post(f"write the lease of {name!r}", "/v3/kv/txn", txn, write=True)
        if not answer.get("succeeded"):
            msg = f"lease {name!r} ({group}) is not at version {version}"
            raise LeaseConflict(msg, details={"lease": name, "group": group})
        # the put's mod_revision is the transaction's revision
        return StoredLease(name=name, record=record, version=str(answer["header"]["revision"]))

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        key = _b64(self._key(group, name))
        txn = {
            "compare": [{"target": "MOD", "key": key, "result": "EQUAL", "mod_revision": version}],
            "success": [{"request_delete_range": {"key": key}}],
        }
        await self._post(f"delete the lease of {name!r}", "/v3/kv/txn", txn, write=True)


def _refused(
    what: str, response: httpx.Response, *, write: bool, user: str | None = None
) -> AdapterFailed | AdapterUnavailable:
    """The coded error of an answer that is not 200; etcd's own words, never the request's."""
    status = response.status_code
    said = _said(response)
    details: dict[str, Any] = {"store": "etcd", "status": status}
    if user is not None and status != HTTPStatus.UNAUTHORIZED and "authentication failed" in said:
        return AdapterFailed(
            f"{what}: etcd refused the user {user!r}: {said}",
            remedy="Check the store's 'username' and 'password' against etcd's users.",
            details={**details, "cause": "authentication_failed"},
        )
    if said.startswith(_CN_REFUSED):
        return AdapterFailed(
            f"{what}: etcd's gateway refuses a client certificate with a CommonName while its "
            "authentication is on",
            remedy="Issue the client certificate ('tls_cert') without a CommonName (etcd's "
            "user is 'username'), or leave etcd's --client-cert-auth off.",
            details={**details, "cause": "client_certificate_common_name"},
        )
    if status == HTTPStatus.FORBIDDEN:
        return AdapterFailed(
            f"{what}: etcd denies it to the store's user: {said}",
            remedy="Grant the user a role with readwrite on the store's 'prefix' (etcdctl role "
            "grant-permission --prefix).",
            details={**details, "cause": "permission_denied"},
        )
    if said in _NO_USER:
        return AdapterFailed(
            f"{what}: etcd's authentication is on and the store has no user",
            remedy="Give the store a 'username' and 'password' of an etcd user.",
            details={**details, "cause": "authentication_required"},
        )
    failed = AdapterFailed if write else AdapterUnavailable
    return failed(f"{what}: etcd refused it ({status}): {said}", details=details)


def _said(response: httpx.Response) -> str:
    try:
        answer = response.json()
    except ValueError:
        return response.text[:300].strip()
    if isinstance(answer, dict):
        return str(answer.get("message") or answer.get("error") or "")[:300]
    return response.text[:300].strip()
