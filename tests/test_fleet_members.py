"""What a fleet takes of its members as they come: their names, and what they say they can do.

A member may be named as its runtime names it: EKS names a kubeconfig context after its
cluster's ARN (``arn:aws:eks:<region>:<account>:cluster/<name>``), so a ``kubernetes-multi``
member's name may hold ``/``, the separator of a fleet's volume handles (``<member>/<member's
handle>``).
"""

from __future__ import annotations

import pytest

from pando_runtime import BytesReceiveStream, VolumeRequest, read_all
from pando_runtime.fleet import FleetAdapter, FleetMembers
from pando_runtime.testing import FakeAdapter, make_tar, read_tar

PROD = "arn:aws:eks:eu-west-1:123456789012:cluster/prod"
STAGING = "arn:aws:eks:eu-west-1:123456789012:cluster/staging"


class _Made:
    def __init__(self, members: FleetMembers) -> None:
        self.members = members

    async def open(self) -> FleetMembers:
        return self.members


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # no I/O of its own: the backends do not differ here


@pytest.mark.anyio
async def test_a_volume_handle_finds_a_member_whose_name_holds_a_slash() -> None:
    members = {PROD: FakeAdapter(), STAGING: FakeAdapter()}
    source = _Made(FleetMembers(adapters=members, control=PROD, default=STAGING))
    async with FleetAdapter(source=source, noun="cluster") as fleet:
        request = VolumeRequest(volume_id="v1", bundle_id="shop", name="data")
        handle = await fleet.create_volume(request)  # found nowhere: the default member
        assert handle.handle.startswith(f"{STAGING}/")
        await fleet.restore_volume(handle, BytesReceiveStream(make_tar({"kept": b"1"})))
        async with fleet.snapshot_volume(handle) as stream:
            assert read_tar(await read_all(stream)) == {"kept": b"1"}
        await fleet.destroy_volume(handle)
        assert not await members[STAGING].held_bundles(), "deleted on its member"
