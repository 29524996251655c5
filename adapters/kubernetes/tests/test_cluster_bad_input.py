"""Bad plans, generated, against the Kubernetes adapter: refused before anything is written.

Each refused apply made no write call (counted by the adapter's transport) and left no
namespace on the cluster (read by an admin client).
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from bad_input import VALID_BUNDLE, assert_refused_well, mutated
from hypothesis import HealthCheck, given, settings
from pando_runtime_kubernetes import KubernetesAdapter
from pando_runtime_kubernetes._names import namespace_for

import pando_runtime as pr

pytestmark = [pytest.mark.kube]

WRITES = ("POST", "PATCH", "PUT", "DELETE")


def _namespace_exists(admin_api: Any, name: str) -> bool:
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        client.CoreV1Api(admin_api).read_namespace(name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(doc=mutated(VALID_BUNDLE, min_mutations=1))
def test_refused_plans_write_nothing(
    doc: Any, adapter_config: dict[str, Any], admin_api: Any
) -> None:
    if isinstance(doc, dict) and doc.get("bundle_id") == VALID_BUNDLE["bundle_id"]:
        doc["bundle_id"] = f"bad-{uuid.uuid4().hex[:8]}"  # each example an app of its own
    try:
        plan = pr.structure(doc, pr.BundlePlan)
    except pr.InvalidInput as error:
        assert_refused_well(error)
        return
    namespace = namespace_for(plan.bundle_id)
    existed = _namespace_exists(admin_api, namespace)
    adapter = KubernetesAdapter(adapter_config)

    async def apply() -> pr.PandoRuntimeError | None:
        try:
            await adapter.apply(plan)
        except (pr.InvalidInput, pr.CapabilityUnsupported) as error:
            return error
        finally:
            await adapter.aclose()
        return None

    refused = anyio.run(apply)
    if refused is None:  # a mutation that left the plan good: it was applied; remove it
        cleanup = KubernetesAdapter(adapter_config)

        async def destroy() -> None:
            async with cleanup:
                await cleanup.destroy(
                    pr.BundleRef(plan.bundle_id), pr.DestroyOptions(keep_volumes=False)
                )

        anyio.run(destroy)
        return
    if isinstance(refused, pr.InvalidInput):
        assert_refused_well(refused)
    writes = {
        k: n for k, n in adapter.session.connection.calls_by_kind.items() if k.startswith(WRITES)
    }
    assert writes == {}, f"a refused apply wrote: {writes}"
    assert existed or not _namespace_exists(admin_api, namespace)


@pytest.mark.anyio
async def test_a_missing_runtime_class_fails_the_health_check_with_a_remedy(
    adapter_config: dict[str, Any],
) -> None:
    name = f"missing-{uuid.uuid4().hex[:8]}"
    settings = {**adapter_config, "runtime_class": name, "trust_network_policy": True}
    async with KubernetesAdapter(settings) as adapter:
        with pytest.raises(pr.AdapterUnavailable) as caught:
            await adapter.health_check()
    assert f"RuntimeClass {name!r} is not usable: it does not exist" in caught.value.message
    assert caught.value.remedy is not None
    assert "runtime_class" in caught.value.remedy
    assert caught.value.details["status"] == 404
