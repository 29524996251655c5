"""The fake adapter's info and settings, light enough to list without importing it."""

from __future__ import annotations

import attrs

from ._config import setting
from ._info import AdapterInfo

__all__ = ["FAKE", "FakeConfig"]

GIB = 1024**3


@attrs.frozen(kw_only=True)
class FakeConfig:
    """Settings of the fake adapter, for ``load_adapter("fake", {...})``."""

    nodes: int = setting(default=2, help="How many equal nodes the fake runtime has.")
    node_cpu_millis: int = setting(default=4000, help="CPU of each node, in millicores.")
    node_memory_bytes: int = setting(default=8 * GIB, help="Memory of each node, in bytes.")
    platform: str = setting(default="linux/amd64", help="The platform the fake reports.")
    max_staleness: float = setting(
        default=30.0,
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
    config_class=FakeConfig,
    distribution="pando-runtime",
)
