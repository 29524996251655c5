"""Test support for hosts and adapter authors.

- :class:`FakeAdapter`: an in-memory runtime for a host's unit tests; ``fake.replica()``
  makes another host replica of it (:class:`FakeReplica`), for membership tests.
- :class:`MemoryCatalog`: an in-memory catalog backend for catalog sync tests.
- :mod:`pando_runtime.testing.conformance`: the contract as tests, for adapters.
"""

from __future__ import annotations

from ._clock import FakeClock
from ._fake import FakeAdapter, FakeConfig, FakeNode, FakeReplica, ImageBehaviour
from ._fake_exec import ExecContext, ExecHandler, scripted
from ._fake_membership import FakeLeaseStore
from ._faults import Faults
from ._memory_catalog import MemoryCatalog
from ._tar import make_tar, read_tar

__all__ = [
    "ExecContext",
    "ExecHandler",
    "FakeAdapter",
    "FakeClock",
    "FakeConfig",
    "FakeLeaseStore",
    "FakeNode",
    "FakeReplica",
    "Faults",
    "ImageBehaviour",
    "MemoryCatalog",
    "make_tar",
    "read_tar",
    "scripted",
]
