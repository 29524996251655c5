"""What a fleet takes of its members as they come: their names, and what they say they can do.

A member may be named as its runtime names it: EKS names a kubeconfig context after its
cluster's ARN (``arn:aws:eks:<region>:<account>:cluster/<name>``), so a ``kubernetes-multi``
member's name may hold ``/``, the separator of a fleet's volume handles (``<member>/<member's
handle>``).
"""

from __future__ import annotations

import attrs
import pytest

from pando_runtime import AdapterUnavailable, BytesReceiveStream, VolumeRequest, read_all
from pando_runtime.fleet import FleetAdapter, FleetMembers
from pando_runtime.testing import FakeAdapter, make_tar, read_tar

pytestmark = pytest.mark.anyio

PROD = "arn:aws:eks:eu-west-1:123456789012:cluster/prod"
STAGING = "arn:aws:eks:eu-west-1:123456789012:cluster/staging"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # no I/O of their own: the backends do not differ here


async def test_a_volume_handle_finds_a_member_whose_name_holds_a_slash() -> None:
    members = {PROD: FakeAdapter(), STAGING: FakeAdapter()}
    made = FleetMembers(adapters=members, control=PROD, default=STAGING)
    async with FleetAdapter(source=made, noun="cluster") as fleet:
        request = VolumeRequest(volume_id="v1", bundle_id="shop", name="data")
        handle = await fleet.create_volume(request)  # found nowhere: the default member
        assert handle.handle.startswith(f"{STAGING}/")
        await fleet.restore_volume(handle, BytesReceiveStream(make_tar({"kept": b"1"})))
        async with fleet.snapshot_volume(handle) as stream:
            assert read_tar(await read_all(stream)) == {"kept": b"1"}
        await fleet.destroy_volume(handle)
        assert not await members[STAGING].held_bundles(), "deleted on its member"


async def test_a_members_capabilities_are_its_latest_and_its_last_while_it_is_silent() -> None:
    late = FakeAdapter()
    late.world.capabilities = attrs.evolve(late.world.capabilities, reports_usage=False)
    made = FleetMembers(adapters={"a": FakeAdapter(), "b": late}, control="a")
    async with FleetAdapter(source=made) as fleet:
        assert not (await fleet.capabilities()).reports_usage, "what every member has"
        # b learns it can (a Kubernetes cluster whose metrics API answered since).
        late.world.capabilities = attrs.evolve(late.world.capabilities, reports_usage=True)
        assert (await fleet.capabilities()).reports_usage, "not b's first answer for good"
        late.faults.fail_next("capabilities", AdapterUnavailable("b is silent"))
        assert (await fleet.capabilities()).reports_usage, "b's last answer"
        assert not late.faults.pending("capabilities"), "b was asked"
