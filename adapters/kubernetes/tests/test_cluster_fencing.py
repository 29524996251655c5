"""Fencing several host replicas at the API server (deploy/admission.yaml's fence policies).

The module installs the shipped policies as an installer would; the adapters run as the
restricted user the parameters name. A replica whose write is stuck in flight (a Toxiproxy
latency toxic on its proxy) past its lease sees it refused when it lands after the other
replica took the app over; an administrator's write with a stale token is refused; a stamp
only moves forward and of two stamps made on one version one wins; and a host that never
joins a membership writes exactly as before.
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _admin_calls import core_call
from _admission import installed_admission
from kubernetes.client.exceptions import ApiException
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import (
    ANN_FENCE,
    ANN_WRITTEN_UNDER,
    env_secret_name,
    namespace_for,
)
from pando_runtime_kubernetes.api._paths import api_path
from pando_runtime_kubernetes.session._errors import WriteConflict

import pando_runtime as pr

pytestmark = [pytest.mark.kube, pytest.mark.anyio, pytest.mark.every_minor]

SETTINGS = pr.MembershipSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.25)
IMAGE = "registry.example/fence/app:1"
MERGE = "application/merge-patch+json"
FIRST_APPLY = {
    "POST namespaces",
    "PATCH namespaces",
    "PATCH rolebindings",
    "PATCH serviceaccounts",
    "PATCH networkpolicies",
    "PATCH resourcequotas",
    "POST secrets",  # the namespace's plan key
    "PATCH secrets",
    "POST pods",
}
"""The kinds of the 9 calls of a first apply of a one-workload app without ports."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def fence(kube_cluster: Any, admin_api: Any, adapter_config: dict[str, Any]) -> Iterator[None]:
    """The shipped policies, enforcing for this module; removed afterwards."""
    with installed_admission(
        admin_api, kube_cluster.restricted_user, adapter_config["edge_namespace"]
    ):
        yield


def _plan(bundle_id: str, value: str) -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=bundle_id,
        workloads=(pr.WorkloadPlan(name="web", image=IMAGE, env={"V": value}),),
    )


async def until(check: Callable[[], bool]) -> None:
    """Wait (up to 60 s, a bound that only catches a hang) until ``check()`` holds."""
    with anyio.fail_after(60):
        while True:
            if check():
                return
            await anyio.sleep(SETTINGS.retry_period)


async def _annotations(admin_api: Any, fn: str, *args: Any) -> dict[str, str]:
    found = await core_call(admin_api, fn, *args)
    return dict(found.metadata.annotations or {})


async def _env(admin_api: Any, bundle_id: str) -> str:
    ns = namespace_for(bundle_id)
    secret = await core_call(admin_api, "read_namespaced_secret", env_secret_name("web"), ns)
    return base64.b64decode(secret.data["V"]).decode()


@contextlib.asynccontextmanager
async def _two_replicas(
    config_a: dict[str, Any], config_b: dict[str, Any], prefix: str
) -> AsyncIterator[tuple[KubernetesAdapter, KubernetesAdapter, pr.Membership, pr.Membership]]:
    names = {f"{prefix}-a", f"{prefix}-b"}
    async with (
        KubernetesAdapter(config_a) as a,
        KubernetesAdapter(config_b) as b,
        a.membership(f"{prefix}-a", SETTINGS) as ma,
        b.membership(f"{prefix}-b", SETTINGS) as mb,
    ):
        await until(lambda: ma.members() == names and mb.members() == names)
        yield a, b, ma, mb


async def _calls_of(adapter: KubernetesAdapter, call: Awaitable[Any]) -> dict[str, int]:
    """The API calls ``call`` made, by kind (not the watches', nor the membership's Leases)."""
    before = dict(adapter.session.connection.calls_by_kind)
    await call
    return {
        kind: n - before.get(kind, 0)
        for kind, n in adapter.session.connection.calls_by_kind.items()
        if n != before.get(kind, 0) and not kind.startswith("STREAM") and kind[-7:] != " leases"
    }


def _epoch(stamp: str) -> int:
    return int(stamp.split("/", maxsplit=1)[0])


def _owned_by(owner: str, members: list[str], prefix: str) -> str:
    """A new bundle id the members assign to ``owner``."""
    while True:
        bundle_id = f"{prefix}-{uuid.uuid4().hex[:6]}"
        if pr.rendezvous_owner(bundle_id, members) == owner:
            return bundle_id


async def test_a_write_stuck_in_flight_past_the_lease_is_refused_when_it_lands(
    fence: None,
    admin_api: Any,
    adapter_config: dict[str, Any],
    conformance_config: dict[str, Any],
    apiserver_proxy: Any,
) -> None:
    """a reaches the API server through a proxy; its write is held there while b takes over."""
    if apiserver_proxy is None:
        pytest.skip("no Toxiproxy proxy on this backend")
    toxiproxy, proxy = apiserver_proxy.toxiproxy, apiserver_proxy.proxy.name
    try:
        async with _two_replicas(conformance_config, adapter_config, "stall") as (a, b, ma, mb):
            bundle_id = _owned_by("stall-a", ["stall-a", "stall-b"], "stall")
            ns = namespace_for(bundle_id)
            await a.apply(_plan(bundle_id, "1"))
            stamp = (await _annotations(admin_api, "read_namespace", ns))[ANN_FENCE]
            assert stamp.endswith("/stall-a"), "the namespace a created carries a's stamp"
            taken = f"{_epoch(stamp) + 1}/stall-b"
            secret = await _annotations(
                admin_api, "read_namespaced_secret", env_secret_name("web"), ns
            )
            assert secret[ANN_WRITTEN_UNDER] == stamp

            # Every byte a sends now waits at the proxy (until the toxic goes): its renewals,
            # and the write of its next apply, made while it still owns the app.
            sent_before = a.session.connection.calls_by_kind.get("PATCH secrets", 0)
            await anyio.to_thread.run_sync(
                lambda: toxiproxy.add_toxic(
                    proxy, "latency", name="stall", stream="upstream", latency=600_000
                )
            )
            outcome: dict[str, BaseException | None] = {}

            async def stalled_apply() -> None:
                try:
                    await a.apply(_plan(bundle_id, "2"))
                except BaseException as error:  # noqa: BLE001 - the outcome is the test's
                    outcome["a"] = error
                else:
                    outcome["a"] = None

            async with anyio.create_task_group() as group:
                group.start_soon(stalled_apply)
                await until(
                    lambda: a.session.connection.calls_by_kind.get("PATCH secrets", 0) > sent_before
                )
                # a's lease expires unrenewed; b owns the app, stamps it and writes it.
                await until(lambda: mb.owns(bundle_id))
                assert not ma.owns(bundle_id), "a stopped at its renew deadline"
                await b.apply(_plan(bundle_id, "3"))
                assert b.fence_stamps == 1, "one stamp for the bundle b gained"
                assert (await _annotations(admin_api, "read_namespace", ns))[ANN_FENCE] == taken
                assert "a" not in outcome, "a's write is still held at the proxy"
                # Let a's write land now, long after b took over.
                await anyio.to_thread.run_sync(lambda: toxiproxy.remove_toxic(proxy, "stall"))
            refused = outcome["a"]
            assert isinstance(refused, pr.NotOwner), refused
            assert refused.details["owner"] == "stall-b"
            assert refused.details["stamp"] == taken
            assert a.fence_refusals == 1
            assert await _env(admin_api, bundle_id) == "3", "the object holds b's write"
            secret = await _annotations(
                admin_api, "read_namespaced_secret", env_secret_name("web"), ns
            )
            assert secret[ANN_WRITTEN_UNDER] == taken
            # a is back (its held renewals landed): the app may be moving back to it.
            with mb.override(bundle_id):
                await b.destroy(pr.BundleRef(bundle_id))
            # Nothing a sent may land after it left (a held Lease write would bring it back
            # as a member in the next test's eyes).
            transport = await a.session.connection.transport()
            await until(lambda: transport.in_flight == 0)
    finally:
        toxiproxy.reset()


async def test_an_administrators_write_with_a_stale_token_is_refused(
    fence: None, admin_api: Any, adapter_config: dict[str, Any]
) -> None:
    async with (
        KubernetesAdapter(adapter_config) as a,
        a.membership("admin-a", SETTINGS) as ma,
    ):
        await until(lambda: ma.members() == {"admin-a"})
        bundle_id = f"admin-{uuid.uuid4().hex[:6]}"
        ns = namespace_for(bundle_id)
        first = await _calls_of(a, a.apply(_plan(bundle_id, "1")))
        assert set(first) == FIRST_APPLY | {"GET namespaces"}, first  # one read of its stamp
        assert first["GET namespaces"] == 1
        assert first["POST namespaces"] == 1, "its create carries the stamp"
        assert a.fence_stamps == 0, "no stamp write for an app the replica creates"
        stamp = (await _annotations(admin_api, "read_namespace", ns))[ANN_FENCE]
        e = _epoch(stamp)

        def config_map(name: str, token: str) -> dict[str, Any]:
            return {"metadata": {"name": name, "annotations": {ANN_WRITTEN_UNDER: token}}}

        with pytest.raises(ApiException) as caught:
            await core_call(admin_api, "create_namespaced_config_map", ns, config_map("x", "0/old"))
        assert caught.value.status == 403
        assert f"pando: fenced: namespace {ns} is stamped {stamp};" in str(caught.value.body)
        # The current token is admitted, and so is a write carrying none.
        await core_call(
            admin_api,
            "create_namespaced_config_map",
            ns,
            config_map("y", stamp),
            dry_run="All",
        )
        await core_call(
            admin_api,
            "create_namespaced_config_map",
            ns,
            {"metadata": {"name": "z"}},
            dry_run="All",
        )

        # An administrator moves the stamp on (forward): the replica's next write is refused,
        # and a controller-like update leaving the old token as it was is still admitted.
        await core_call(
            admin_api,
            "patch_namespace",
            ns,
            {"metadata": {"annotations": {ANN_FENCE: f"{e + 4}/ops"}}},
        )
        label = {"metadata": {"labels": {"checked": "yes"}}}
        await core_call(admin_api, "patch_namespaced_secret", env_secret_name("web"), ns, label)
        with pytest.raises(pr.NotOwner) as refused:
            await a.apply(_plan(bundle_id, "2"))
        assert refused.value.details["owner"] == "ops"
        assert await _env(admin_api, bundle_id) == "1", "nothing of the refused apply landed"

        # A stamp never moves back.
        back = {"metadata": {"annotations": {ANN_FENCE: f"{e + 1}/admin-a"}}}
        with pytest.raises(ApiException) as caught:
            await core_call(admin_api, "patch_namespace", ns, back)
        assert "a namespace's stamp only moves forward" in str(caught.value.body)

        # The replica's next apply stamps anew, after the administrator's stamp, and writes.
        await a.apply(_plan(bundle_id, "2"))
        assert (await _annotations(admin_api, "read_namespace", ns))[
            ANN_FENCE
        ] == f"{e + 5}/admin-a"
        assert await _env(admin_api, bundle_id) == "2"

        # A destroy under a stamp that moved on is refused: the namespace stays.
        moved = {"metadata": {"annotations": {ANN_FENCE: f"{e + 6}/ops"}}}
        await core_call(admin_api, "patch_namespace", ns, moved)
        with pytest.raises(pr.NotOwner) as refused:
            await a.destroy(pr.BundleRef(bundle_id))
        assert refused.value.details["owner"] == "ops"
        namespace = await core_call(admin_api, "read_namespace", ns)
        assert namespace.metadata.deletion_timestamp is None
        await a.destroy(pr.BundleRef(bundle_id))  # a new stamp, then the delete
        namespace = await core_call(admin_api, "read_namespace", ns)
        assert namespace.metadata.deletion_timestamp is not None, "a fenced destroy lands"
        assert namespace.metadata.annotations[ANN_FENCE] == f"{e + 7}/admin-a"
        assert a.fence_refusals == 2


async def test_of_two_stamps_made_on_one_version_one_wins(
    fence: None, admin_api: Any, adapter_config: dict[str, Any]
) -> None:
    async with (
        KubernetesAdapter(adapter_config) as a,
        KubernetesAdapter(adapter_config) as b,
    ):
        bundle_id = f"race-{uuid.uuid4().hex[:6]}"
        ns = namespace_for(bundle_id)
        await a.apply(_plan(bundle_id, "1"))  # no membership: no stamp yet
        path = api_path(None, "namespaces", ns)
        version = (await core_call(admin_api, "read_namespace", ns)).metadata.resource_version

        async def stamp(adapter: KubernetesAdapter, value: str) -> None:
            patch = {"metadata": {"annotations": {ANN_FENCE: value, ANN_WRITTEN_UNDER: value}}}
            await adapter.session.writer.write_if(
                f"stamp {ns}", path, patch, version=version, method="PATCH", content_type=MERGE
            )

        await stamp(a, "1/race-a")
        with pytest.raises(WriteConflict):
            await stamp(b, "1/race-b")
        assert (await _annotations(admin_api, "read_namespace", ns))[ANN_FENCE] == "1/race-a"
        # A delete made on the version before the stamp fails too (a fenced destroy's shape).
        with pytest.raises(WriteConflict):
            await b.session.writer.delete(None, "namespaces", ns, version=version)
        namespace = await core_call(admin_api, "read_namespace", ns)
        assert namespace.metadata.deletion_timestamp is None
        await a.destroy(pr.BundleRef(bundle_id))


async def test_a_host_that_never_joins_writes_as_before(
    fence: None, admin_api: Any, adapter_config: dict[str, Any]
) -> None:
    async with KubernetesAdapter(adapter_config) as adapter:
        bundle_id = f"solo-{uuid.uuid4().hex[:6]}"
        ns = namespace_for(bundle_id)
        first = await _calls_of(adapter, adapter.apply(_plan(bundle_id, "1")))
        assert set(first) == FIRST_APPLY, first  # no stamp read, none written
        assert first["PATCH namespaces"] == 1, "the namespace's own apply, no stamp"
        calls = adapter.api_calls
        await adapter.apply(_plan(bundle_id, "1"))
        assert adapter.api_calls == calls, "re-apply: 0 calls"
        assert (await adapter.observe(pr.BundleRef(bundle_id))).exists
        assert adapter.api_calls == calls, "observe: 0 calls"
        assert adapter.fence_stamps == 0
        assert ANN_FENCE not in await _annotations(admin_api, "read_namespace", ns)
        secret = await _annotations(admin_api, "read_namespaced_secret", env_secret_name("web"), ns)
        assert ANN_WRITTEN_UNDER not in secret
        await adapter.destroy(pr.BundleRef(bundle_id))
