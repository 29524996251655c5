"""The etcd lease store: a key per lease, transactions on ``mod_revision``, linearizable reads.

Everything goes through etcd's HTTP/JSON gateway (``POST /v3/kv/range``, ``/v3/kv/txn``;
keys and values base64, 64-bit numbers as strings) with httpx, so no gRPC client is needed
and the store runs on asyncio and trio. A version is the key's ``mod_revision``: etcd's
revision is global and never reused, so a re-created lease never carries an old version.
No etcd lease (TTL) is attached to a key: expiry is the membership's, never the store's.
"""

from __future__ import annotations

import base64
from http import HTTPStatus
from typing import Any, Self

import httpx

from pando_runtime import AdapterFailed, AdapterUnavailable
from pando_runtime.plugin import (
    LeaseConflict,
    LeaseRecord,
    StoredLease,
    decode_lease_record,
    encode_lease_record,
)

from ._info import EtcdLeaseConfig

__all__ = ["EtcdLeaseStore", "etcd_lease_store"]

_UNREACHABLE = "Check the store's 'address' and that etcd is up with a leader."


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
            base_url=config.address.rstrip("/"), timeout=config.timeout, verify=config.verify
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections (the keys stay)."""
        await self._client.aclose()

    def _key(self, group: str, name: str = "") -> str:
        return f"{self.config.prefix}{group}/{name}"

    async def _post(self, what: str, path: str, body: dict[str, Any], *, write: bool) -> Any:
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as error:
            msg = f"{what}: etcd at {self.config.address} did not answer: {type(error).__name__}"
            raise AdapterUnavailable(msg, remedy=_UNREACHABLE, details={"store": "etcd"}) from None
        if response.status_code != HTTPStatus.OK:
            failed = AdapterFailed if write else AdapterUnavailable
            msg = f"{what}: etcd refused it ({response.status_code}): {response.text[:300]}"
            raise failed(msg, details={"store": "etcd", "status": response.status_code})
        return response.json()

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
