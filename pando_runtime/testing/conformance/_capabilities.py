"""Conformance: capabilities are data, and what an adapter lacks raises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from ..._contract._capabilities import Capability, RuntimeCapabilities
from ..._contract._edge import EdgePlan
from ..._contract._errors import CapabilityUnsupported
from ..._contract._exec import ExecRequest
from ..._contract._refs import BundleRef, WorkloadRef
from ..._contract._streams import BytesReceiveStream
from ..._contract._trial import TrialRequest
from ..._contract._volumes import VolumeHandle, VolumeRequest
from ..._input._convert import from_json, to_json
from ._base import ConformanceBase, Kit, since

__all__ = ["CapabilityConformance"]


def _probes(kit: Kit) -> dict[Capability, list[Callable[[], Awaitable[object]]]]:
    adapter = kit.adapter
    ref = WorkloadRef(kit.new_id("absent"), "web")
    handle = VolumeHandle(volume_id=kit.new_id("vol"), handle="none")

    async def exec_() -> None:
        async with adapter.exec(ref, ExecRequest(command=("true",))):
            pass

    async def watch() -> None:
        async with adapter.watch_bundles():
            pass

    async def member() -> None:
        async with adapter.membership("conformance-probe"):
            pass

    async def snapshot() -> None:
        async with adapter.snapshot_volume(handle):
            pass

    return {
        Capability.EXEC: [exec_],
        Capability.BUNDLE_EVENTS: [watch],
        Capability.REPORTS_USAGE: [lambda: adapter.usage(BundleRef(ref.bundle_id)), adapter.in_use],
        Capability.PERSISTENT_VOLUMES: [
            lambda: adapter.create_volume(
                VolumeRequest(volume_id=handle.volume_id, bundle_id=ref.bundle_id, name="x")
            ),
            lambda: adapter.destroy_volume(handle),
            snapshot,
            lambda: adapter.restore_volume(handle, BytesReceiveStream(b"")),
        ],
        Capability.IMAGE_IMPORT: [lambda: adapter.import_image(BytesReceiveStream(b"x"))],
        Capability.TRIAL_RUN: [
            lambda: adapter.trial(TrialRequest(trial_id="t1", image="example/app:1"))
        ],
        Capability.MEMBERSHIP: [member],
        Capability.EDGE: [
            lambda: adapter.apply_edge(EdgePlan(name="edge", image="example/edge:1")),
            lambda: adapter.observe_edge("edge"),
            lambda: adapter.remove_edge("edge"),
            adapter.edges,
            adapter.edge_volumes,
        ],
    }


class CapabilityConformance(ConformanceBase):
    """Capabilities are data; a missing one raises ``CapabilityUnsupported`` by name."""

    @since("1.0")
    async def test_capabilities_are_data(self, kit: Kit) -> None:
        caps = await kit.adapter.capabilities()
        assert isinstance(caps, RuntimeCapabilities)
        assert from_json(to_json(caps), RuntimeCapabilities) == caps
        assert caps == await kit.adapter.capabilities(), "capabilities are stable"

    @since("1.0")
    async def test_every_unsupported_capability_raises(self, kit: Kit) -> None:
        lacking = [(c, probes) for c, probes in _probes(kit).items() if not kit.caps.supports(c)]
        if not lacking:
            pytest.skip("the adapter supports every gated capability")
        for capability, probes in lacking:
            for probe in probes:
                with pytest.raises(CapabilityUnsupported) as caught:
                    await probe()
                assert caught.value.capability == capability.value
                assert isinstance(caught.value, NotImplementedError)

    @since("1.0")
    async def test_info_describes_the_adapter(self, kit: Kit) -> None:
        info = kit.adapter.info
        assert info.name == kit.adapter.kind
        assert info.description
        schema = info.config_schema()
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
