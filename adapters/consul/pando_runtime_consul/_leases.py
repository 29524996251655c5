"""The Consul lease store: a KV entry per lease, written by transactions on its ModifyIndex.

Writes go through ``PUT /v1/txn`` (``cas`` with index 0 creates only if absent; ``cas`` with
the entry's ``ModifyIndex`` replaces only if unchanged; ``delete-cas``), because a plain KV
``PUT`` answers ``true`` without the new index. A ``ModifyIndex`` is a Raft index: it never
repeats, even for a key deleted and created again. Reads are ``?consistent``: the leader
confirms it still leads before answering, so a read sees every write that ended before it.
No session is attached to a key: expiry is the membership's, never Consul's.

Consul skips a write whose value equals the stored one and keeps its ``ModifyIndex``: two
writers at one index writing the same record would then both succeed. Each value therefore
carries a nonce of its write (``write``), so every successful write moves the index.
"""

from __future__ import annotations

import base64
import json
import uuid
from http import HTTPStatus
from typing import Any, Self
from urllib.parse import quote

import httpx

from pando_runtime import AdapterFailed, AdapterUnavailable
from pando_runtime.plugin import (
    LeaseConflict,
    LeaseRecord,
    StoredLease,
    decode_lease_record,
    encode_lease_record,
    tls_failure_message,
)

from ._http import TLS_REMEDY, consul_client, datacenter_params
from ._info import ConsulLeaseConfig

__all__ = ["ConsulLeaseStore", "consul_lease_store"]

_UNREACHABLE = "Check the store's 'address' and that Consul is up with a leader."


def _value(record: LeaseRecord) -> str:
    """The entry's value: the record's JSON and a nonce of this write, base64."""
    body = json.loads(encode_lease_record(record)) | {"write": uuid.uuid4().hex}
    return base64.b64encode(json.dumps(body, separators=(",", ":")).encode()).decode()


def consul_lease_store(config: ConsulLeaseConfig) -> ConsulLeaseStore:
    """The factory ``load_lease_store("consul", ...)`` calls."""
    return ConsulLeaseStore(config)


class ConsulLeaseStore:
    """A :class:`~pando_runtime.plugin.LeaseStoreClient` over Consul's KV store.

    One call per read, one transaction per write. A call that gets no answer within
    ``timeout`` seconds (Consul stopped, frozen) is :class:`~pando_runtime.AdapterUnavailable`.
    """

    def __init__(self, config: ConsulLeaseConfig) -> None:
        self.config = config
        self._client = consul_client(config)
        self._params = datacenter_params(config)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections (the entries stay)."""
        await self._client.aclose()

    def _key(self, group: str, name: str = "") -> str:
        return f"{self.config.prefix}{group}/{name}"

    async def _send(
        self, what: str, method: str, path: str, *, params: dict[str, str], json: Any = None
    ) -> httpx.Response:
        try:
            return await self._client.request(
                method, path, params={**self._params, **params}, json=json
            )
        except httpx.HTTPError as error:
            said = tls_failure_message(error)
            if said is not None:  # a setting's, not an outage: retrying changes nothing
                raise AdapterFailed(
                    f"{what}: TLS with consul at {self.config.address} failed: {said}",
                    remedy=TLS_REMEDY,
                    details={"store": "consul", "cause": "tls_handshake", "tls": said},
                ) from None
            msg = f"{what}: consul at {self.config.address} did not answer: {type(error).__name__}"
            raise AdapterUnavailable(
                msg, remedy=_UNREACHABLE, details={"store": "consul"}
            ) from None

    @staticmethod
    def _refused(
        what: str, response: httpx.Response, *, write: bool
    ) -> AdapterFailed | AdapterUnavailable:
        failed = AdapterFailed if write else AdapterUnavailable
        remedy = "See Consul's answer in the message."
        if response.status_code in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN):
            remedy = "Give the 'token' setting an ACL token with key write on the prefix."
        msg = f"{what}: consul refused it ({response.status_code}): {response.text[:300]}"
        return failed(
            msg, remedy=remedy, details={"store": "consul", "status": response.status_code}
        )

    async def list_leases(self, group: str) -> tuple[StoredLease, ...]:
        what = f"list the {group} leases"
        prefix = self._key(group)
        response = await self._send(
            what, "GET", f"/v1/kv/{quote(prefix)}", params={"recurse": "true", "consistent": ""}
        )
        if response.status_code == HTTPStatus.NOT_FOUND:
            return ()
        if response.status_code != HTTPStatus.OK:
            raise self._refused(what, response, write=False)
        leases = []
        for entry in response.json() or ():
            name = str(entry["Key"])[len(prefix) :]
            record = decode_lease_record(base64.b64decode(entry.get("Value") or ""))
            if record is not None and name and "/" not in name:
                leases.append(
                    StoredLease(name=name, record=record, version=str(entry["ModifyIndex"]))
                )
        return tuple(sorted(leases, key=lambda lease: lease.name))

    async def read_lease(self, group: str, name: str) -> StoredLease | None:
        what = f"read the lease of {name!r}"
        key = self._key(group, name)
        response = await self._send(what, "GET", f"/v1/kv/{quote(key)}", params={"consistent": ""})
        if response.status_code == HTTPStatus.NOT_FOUND:
            return None
        if response.status_code != HTTPStatus.OK:
            raise self._refused(what, response, write=False)
        for entry in response.json() or ():
            record = decode_lease_record(base64.b64decode(entry.get("Value") or ""))
            if record is not None and entry.get("Key") == key:
                return StoredLease(name=name, record=record, version=str(entry["ModifyIndex"]))
        return None

    async def _txn(self, what: str, operation: dict[str, Any]) -> dict[str, Any] | None:
        """The one KV operation's result; ``None`` when its check failed (409)."""
        response = await self._send(what, "PUT", "/v1/txn", params={}, json=[{"KV": operation}])
        if response.status_code == HTTPStatus.CONFLICT:
            return None
        if response.status_code != HTTPStatus.OK:
            raise self._refused(what, response, write=True)
        results = response.json().get("Results") or [{}]
        return dict(results[0].get("KV") or {})

    async def write_lease(
        self, group: str, name: str, record: LeaseRecord, *, version: str | None
    ) -> StoredLease:
        operation = {
            "Verb": "cas",
            "Key": self._key(group, name),
            "Value": _value(record),
            "Index": int(version) if version is not None else 0,  # 0: only if absent
        }
        result = await self._txn(f"write the lease of {name!r}", operation)
        if result is None:
            msg = f"lease {name!r} ({group}) is not at version {version}"
            raise LeaseConflict(msg, details={"lease": name, "group": group})
        return StoredLease(name=name, record=record, version=str(result["ModifyIndex"]))

    async def delete_lease(self, group: str, name: str, *, version: str) -> None:
        operation = {"Verb": "delete-cas", "Key": self._key(group, name), "Index": int(version)}
        await self._txn(f"delete the lease of {name!r}", operation)  # changed or gone: nothing
