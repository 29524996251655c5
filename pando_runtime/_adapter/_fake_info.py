"""The fake adapter's info and settings, light enough to list without importing it."""

from __future__ import annotations

import attrs

from .._contract._version import API_VERSION
from .._input._config import setting
from ._info import AdapterInfo

__all__ = ["FAKE", "FakeConfig"]

GIB = 1024**3
MAX_NODES = 10_000
"""The most nodes the fake makes from its settings (each is an object in memory)."""


@attrs.frozen(kw_only=True)
class FakeConfig:
    """Settings of the fake adapter, for ``load_adapter("fake", {...})``."""

    nodes: int = setting(
        default=2,
        minimum=0,
        maximum=MAX_NODES,
        help="How many equal nodes the fake runtime has (0: no room at all).",
    )
    node_cpu_millis: int = setting(default=4000, minimum=0, help="CPU of each node, in millicores.")
    node_memory_bytes: int = setting(
        default=8 * GIB, minimum=0, help="Memory of each node, in bytes."
    )
    platform: str = setting(default="linux/amd64", help="The platform the fake reports.")
    max_staleness: float = setting(
        default=30.0,
        exclusive_minimum=0,
        help="Seconds observe may answer from unconfirmed state (simulate_cache_down) "
        "before it raises AdapterUnavailable.",
    )
    state_file: str | None = setting(
        default=None,
        help="A JSON file that keeps bundles, volumes and edges between processes (for the CLI).",
    )


FAKE = AdapterInfo(
    name="fake",
    description="In-memory runtime for tests and the quickstart; nothing really runs.",
    factory="pando_runtime.testing._fake:FakeAdapter",
    api_version=API_VERSION,
    config_class=FakeConfig,
    distribution="pando-runtime",
)
