"""Several host replicas on one Docker engine, over a real lease store (the session's etcd).

The membership kit (the tests the fake and Kubernetes pass) on two adapters of one owner and
engine, their leases in etcd: the cheapest real store (a process of its own, no build). The
store-level kit runs on every store in the stores' own tests; here the adapter's part is under
test: its settings, its capabilities, its write guard. Then the settings: a bad store refused at
its path before any I/O, its secrets in no repr and no error.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _docker_harness import DockerHarness
from _docker_tests import adapter_config
from localstores import EtcdServer
from pando_runtime_docker import DockerAdapter
from test_docker_conformance import kit_adapter

import pando_runtime as pr
from pando_runtime.testing.conformance import ConformanceHarness, MembershipConformance


class ReplicaHarness(DockerHarness):
    """The engine's hooks, and a second replica: another adapter with the same settings."""

    @contextlib.asynccontextmanager
    async def replica(self, adapter: pr.RuntimeAdapter) -> AsyncIterator[pr.RuntimeAdapter]:
        async with DockerAdapter(adapter.config) as other:
            yield other


class TestDockerMembership(MembershipConformance):
    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"  # the membership is the core's; the engine's streams are not under test

    @pytest.fixture
    async def adapter(
        self, docker_host: str, owner: str, etcd_server: EtcdServer
    ) -> AsyncIterator[DockerAdapter]:
        store = {
            "kind": "etcd",
            "settings": {"address": etcd_server.address, "prefix": f"docker/{owner}/"},
        }
        reach = {"host": docker_host}
        async with kit_adapter(reach, owner, None, docker_host, lease_store=store) as adapter:
            assert (await adapter.capabilities()).membership
            yield adapter

    @pytest.fixture
    def harness(self, docker_host: str) -> ConformanceHarness:
        return ReplicaHarness(docker_host)


SECRET = f"never-shown-{uuid.uuid4().hex}"


def _with_store(store: dict[str, Any]) -> dict[str, Any]:
    return adapter_config("unix:///nowhere/docker.sock", "o", lease_store=store)


def test_a_bad_store_is_refused_at_its_path_and_its_secret_is_never_shown() -> None:
    store = {"kind": "postgres", "settings": {"password": SECRET, "table": "Not-An-Identifier"}}
    with pytest.raises(pr.InvalidConfig) as caught:
        DockerAdapter(_with_store(store))
    assert [p.path for p in caught.value.problems] == ["lease_store.settings.table"]
    assert SECRET not in str(caught.value) + repr(caught.value.to_dict())
    with pytest.raises(pr.InvalidConfig) as unknown:
        DockerAdapter(_with_store({"kind": "no-such-store"}))
    assert [p.path for p in unknown.value.problems] == ["lease_store.kind"]


@pytest.mark.anyio
async def test_a_store_is_declared_and_joined_only_when_named() -> None:
    store = {"kind": "postgres", "settings": {"password": SECRET}}
    named = DockerAdapter(_with_store(store))
    assert SECRET not in repr(named.config)
    assert (await named.capabilities()).membership
    plain = DockerAdapter(adapter_config("unix:///nowhere/docker.sock", "o"))
    assert not (await plain.capabilities()).membership
    with pytest.raises(pr.CapabilityUnsupported):
        async with plain.membership("a"):
            pass
