"""The membership kit over a real lease store: the fake runtime, its leases in the store.

The conformance kit's membership tests need an adapter with replicas; the fake gives them
and keeps every replica's leases in the store under test (``FakeAdapter(lease_store=...)``),
so the tests the fake and Kubernetes pass run unchanged against each store.
"""

from __future__ import annotations

from pando_runtime.testing.conformance import FakeHarness

__all__ = ["StoreHarness"]


class StoreHarness(FakeHarness):
    """The fake's hooks, waiting longer: every lease call is a real round trip."""

    timeout = 30.0
