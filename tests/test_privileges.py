"""A plan's privileges on the fake: declared not granted, refused before anything is written."""

from __future__ import annotations

import attrs
import pytest

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter

pytestmark = pytest.mark.anyio


def _plan(*capabilities: str) -> pr.BundlePlan:
    privileges = pr.Privileges(capabilities=capabilities)
    workload = pr.WorkloadPlan(name="web", image="registry.example/app:1", privileges=privileges)
    return pr.BundlePlan(bundle_id="app", workloads=(workload,))


async def test_the_fake_grants_nothing_and_says_so() -> None:
    async with FakeAdapter() as fake:
        caps = await fake.capabilities()
        assert caps.default_capabilities is None
        assert caps.grantable_capabilities == ()
        with pytest.raises(pr.CapabilityUnsupported) as refused:
            await fake.apply(_plan("NET_BIND_SERVICE"))
        assert refused.value.capability == "grantable_capabilities"
        assert fake.writes == 0
        assert not (await fake.observe(pr.BundleRef("app"))).exists
        await fake.apply(_plan())  # a plan that asks nothing runs as before
        assert (await fake.observe(pr.BundleRef("app"))).exists


async def test_a_host_can_narrow_or_widen_what_the_fake_claims() -> None:
    async with FakeAdapter() as base:
        caps = await base.capabilities()
    granting = attrs.evolve(caps, grantable_capabilities=("NET_RAW",))
    async with FakeAdapter(capabilities=granting) as fake:
        await fake.apply(_plan("NET_RAW"))
        assert (await fake.observe(pr.BundleRef("app"))).exists
        with pytest.raises(pr.InvalidPlan) as invalid:
            await fake.apply(_plan("CAP_NET_RAW"))
        assert [p.code for p in invalid.value.problems] == ["bad_capability"]
