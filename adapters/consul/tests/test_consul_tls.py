"""The Consul lease store and catalog over TLS: Consul's HTTPS verified against a CA of its
own, a client certificate required there (``verify_incoming``), as production runs it.

One dev agent of the module's own serves its HTTP API over TLS beside plain HTTP; the store
rules pass over TLS, the catalog answers over it, and a TLS that does not hold is a coded
error saying so (the remedy names the settings), never "cannot be reached".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from localcluster.pki import make_ca
from localconsul import ConsulAgent
from localstores import two_clients

import pando_runtime as pr
from pando_runtime.testing.conformance import LeaseStoreConformance

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def tls_agent() -> Iterator[ConsulAgent]:
    with ConsulAgent(tls=True) as agent:
        try:
            yield agent
        finally:
            agent.component.kill()  # its data thrown away: a `consul leave` takes 10 s


@pytest.fixture
def settings(tls_agent: ConsulAgent, tmp_path: Path) -> dict[str, Any]:
    tls = tls_agent.tls
    assert tls is not None
    return {
        "address": tls_agent.https_address,
        "prefix": f"{tmp_path.name}/",
        "timeout": 5.0,
        "tls_ca": str(tls.ca.cert),
        "tls_cert": str(tls.client.cert),
        "tls_key": str(tls.client.key),
    }


class TestConsulRulesOverTls(LeaseStoreConformance):
    @pytest.fixture
    async def lease_stores(
        self, settings: dict[str, Any]
    ) -> AsyncIterator[tuple[pr.plugin.LeaseStoreClient, pr.plugin.LeaseStoreClient]]:
        async with two_clients("consul", settings) as clients:
            yield clients


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_catalog_answers_over_tls_and_says_when_tls_does_not_hold(
    settings: dict[str, Any], tmp_path: Path
) -> None:
    reach = {k: settings[k] for k in ("address", "tls_ca", "tls_cert", "tls_key")}
    catalog = pr.catalog.load_catalog("consul", reach)
    try:
        assert await catalog.check()  # the leader's address, over TLS
    finally:
        await catalog.aclose()
    other = make_ca(tmp_path, "other-ca")
    wrong = pr.catalog.load_catalog("consul", {**reach, "tls_ca": str(other.cert)})
    try:
        with pytest.raises(pr.PandoRuntimeError) as caught:
            await wrong.check()
    finally:
        await wrong.aclose()
    assert caught.value.message.startswith("TLS with consul"), caught.value
    assert caught.value.details["setting"] == "tls_ca"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_store_whose_tls_does_not_hold_says_so(
    settings: dict[str, Any], tmp_path: Path
) -> None:
    other = make_ca(tmp_path, "other-ca")
    store = pr.load_lease_store("consul", {**settings, "tls_ca": str(other.cert)})
    try:
        with pytest.raises(pr.AdapterFailed) as caught:
            await store.list_leases("members")
    finally:
        await store.aclose()
    assert caught.value.details["cause"] == "tls_handshake"
    assert "tls_ca" in (caught.value.remedy or "")


def test_tls_files_are_checked_at_their_paths(tmp_path: Path) -> None:
    with pytest.raises(pr.InvalidConfig) as store:
        pr.load_lease_store(
            "consul",
            {"address": "https://127.0.0.1:8501", "tls_ca": str(tmp_path / "absent.pem")},
        )
    assert [p.path for p in store.value.problems] == ["tls_ca"]
    with pytest.raises(pr.InvalidConfig) as catalog:
        pr.catalog.load_catalog(
            "consul", {"address": "http://127.0.0.1:8500", "tls_cert": "/client.pem"}
        )
    assert [p.path for p in catalog.value.problems] == ["tls_cert"]
