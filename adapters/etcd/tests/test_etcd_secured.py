"""The etcd lease store against an etcd as production runs it: TLS both ways, users and roles.

One etcd of the module's own (Debian's 3.4) serves ``https`` only, verified against a CA of
its own, requires a client certificate (``--client-cert-auth``), and has its authentication
on: the store's user may read and write its prefix alone, and a token unused for a second
is dropped (``--auth-token-ttl 1``). The store rules pass over it; then what goes wrong gets
a coded error that names its cause and never the password or the token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from localcluster.pki import issue_leaf, make_ca
from localstores import EtcdServer, two_clients

import pando_runtime as pr
from pando_runtime.testing.conformance import LeaseStoreConformance

pytestmark = pytest.mark.anyio

PASSWORD = "pw-of-the-store-user"  # noqa: S105 - the test etcd's, on loopback
PREFIX = "secured/"


@pytest.fixture(scope="module")
def secured() -> Iterator[EtcdServer]:
    with EtcdServer(tls=True, token_ttl=1) as server:
        server.enable_auth({"pando": (PASSWORD, PREFIX)}, root_password="pw-of-root")  # noqa: S106
        yield server


@pytest.fixture
def settings(secured: EtcdServer) -> dict[str, Any]:
    tls = secured.tls
    assert tls is not None
    return {
        "address": secured.address,
        "prefix": PREFIX,
        "timeout": 5.0,
        "tls_ca": str(tls.ca.cert),
        "tls_cert": str(tls.client.cert),
        "tls_key": str(tls.client.key),
        "username": "pando",
        "password": PASSWORD,
    }


class TestSecuredEtcdRules(LeaseStoreConformance):
    @pytest.fixture
    async def lease_stores(
        self, settings: dict[str, Any]
    ) -> AsyncIterator[tuple[pr.plugin.LeaseStoreClient, pr.plugin.LeaseStoreClient]]:
        async with two_clients("etcd", settings) as clients:
            yield clients


RECORD = pr.plugin.LeaseRecord(holder="a", renewals=0, duration=10.0)


def _no_secret(error: BaseException) -> None:
    told = f"{error} {getattr(error, 'remedy', '')} {getattr(error, 'details', '')}"
    assert PASSWORD not in told


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_token_etcd_dropped_is_asked_for_again(settings: dict[str, Any]) -> None:
    store: Any = pr.load_lease_store("etcd", settings)
    try:
        await store.write_lease("members", "renewed", RECORD, version=None)
        await anyio.sleep(2.5)  # unused past --auth-token-ttl: etcd dropped it
        assert "renewed" in [lease.name for lease in await store.list_leases("members")]
        assert store.authentications == 2
    finally:
        await store.aclose()
    assert PASSWORD not in repr(store.config)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ({"password": "not-the-password"}, "authentication_failed"),
        ({"username": None, "password": None}, "authentication_required"),
        ({"prefix": "another/"}, "permission_denied"),
    ],
    ids=["wrong password", "no user", "another prefix"],
)
async def test_etcd_refusing_the_user_is_said_with_its_cause(
    settings: dict[str, Any], change: dict[str, Any], cause: str
) -> None:
    caught = await _refusal({**settings, **change}, pr.AdapterFailed)
    assert caught.details["cause"] == cause
    assert caught.remedy


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_tls_that_does_not_hold_is_said_with_its_cause(
    secured: EtcdServer, settings: dict[str, Any], tmp_path: Path
) -> None:
    assert secured.tls is not None
    other_ca = make_ca(tmp_path, "other-ca")
    # of the CA etcd trusts, but naming a CommonName, which etcd's gateway refuses
    named = issue_leaf(tmp_path, secured.tls.ca, "named", subject="/CN=pando", usage="clientAuth")
    cases = {
        "tls_handshake": {**settings, "tls_ca": str(other_ca.cert)},  # etcd's not verified
        "client_certificate_common_name": {
            **settings,
            "tls_cert": str(named.cert),
            "tls_key": str(named.key),
        },
    }
    for cause, given in cases.items():
        caught = await _refusal(given, pr.AdapterFailed)
        assert caught.details["cause"] == cause, caught
        assert "tls_c" in (caught.remedy or ""), caught.remedy
    # No client certificate: under TLS 1.3 etcd closes the connection, which an outage does
    # too; the remedy names what may be missing.
    closed = await _refusal({**settings, "tls_cert": None, "tls_key": None}, pr.AdapterUnavailable)
    assert "'tls_cert' and 'tls_key'" in (closed.remedy or ""), closed.remedy


async def _refusal(settings: dict[str, Any], kind: type[pr.PandoRuntimeError]) -> Any:
    store = pr.load_lease_store("etcd", settings)
    try:
        with pytest.raises(kind) as caught:
            await store.list_leases("members")
    finally:
        await store.aclose()
    _no_secret(caught.value)
    return caught.value


def test_tls_files_and_users_are_checked_at_their_paths(tmp_path: Path) -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_lease_store(
            "etcd",
            {
                "address": "https://127.0.0.1:2379",
                "tls_ca": str(tmp_path / "absent.pem"),
                "tls_cert": str(tmp_path / "cert.pem"),
                "password": PASSWORD,
            },
        )
    paths = sorted(p.path for p in caught.value.problems)
    assert paths == ["password", "tls_ca", "tls_cert"], caught.value.problems
    _no_secret(caught.value)
    with pytest.raises(pr.InvalidConfig) as plain:
        pr.load_lease_store("etcd", {"address": "http://127.0.0.1:2379", "tls_ca": "/ca.pem"})
    assert [p.path for p in plain.value.problems] == ["tls_ca"]
