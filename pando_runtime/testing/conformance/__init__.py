"""The conformance kit: the contract as tests, for any adapter's suite to run.

In your adapter's test suite (see ``docs/conformance.md``)::

    from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite

    pytest_plugins = ["pando_runtime.testing.pytest_plugin"]

    class TestMyAdapter(ConformanceSuite):
        @pytest.fixture
        async def adapter(self):
            async with MyAdapter({...}) as adapter:
                yield adapter

Tests an adapter's capabilities rule out are skipped, with the reason; one
test can be marked expected-to-fail through the ``xfail`` class attribute.
"""

from __future__ import annotations

from ._base import CONFORMANCE_VERSION, ConformanceBase, Kit, requires, since
from ._bundles import BundleConformance, ValidationConformance
from ._capabilities import CapabilityConformance
from ._capacity import CapacityConformance
from ._edge import EdgeConformance
from ._egress import EgressConformance, EgressRefusalConformance
from ._events import EventConformance
from ._exec import ExecConformance
from ._fake_harness import FakeHarness, scripted_fake
from ._fleet import FleetHarness
from ._harness import ConformanceHarness, HarnessCannot
from ._hung import HungRuntimeConformance
from ._lease_stores import LeaseStoreConformance
from ._logs import LogConformance
from ._lost import LostNodeConformance
from ._membership import MembershipConformance
from ._stopping import StoppingConformance
from ._trial import TrialConformance
from ._volumes import VolumeConformance

__all__ = [
    "CONFORMANCE_VERSION",
    "BundleConformance",
    "CapabilityConformance",
    "CapacityConformance",
    "ConformanceBase",
    "ConformanceHarness",
    "ConformanceSuite",
    "EdgeConformance",
    "EgressConformance",
    "EgressRefusalConformance",
    "EventConformance",
    "ExecConformance",
    "FakeHarness",
    "FleetHarness",
    "HarnessCannot",
    "HungRuntimeConformance",
    "Kit",
    "LeaseStoreConformance",
    "LogConformance",
    "LostNodeConformance",
    "MembershipConformance",
    "StoppingConformance",
    "TrialConformance",
    "ValidationConformance",
    "VolumeConformance",
    "requires",
    "scripted_fake",
    "since",
]


class ConformanceSuite(
    BundleConformance,
    ValidationConformance,
    CapabilityConformance,
    CapacityConformance,
    EventConformance,
    LogConformance,
    ExecConformance,
    VolumeConformance,
    TrialConformance,
    EdgeConformance,
    EgressConformance,
    EgressRefusalConformance,
    MembershipConformance,
    StoppingConformance,
    LostNodeConformance,
    HungRuntimeConformance,
):
    """Every conformance test; subclass it and provide an ``adapter`` fixture."""
