"""What ``available_adapters()`` reads: no adapter code is imported from here."""

from __future__ import annotations

import attrs

import pando_runtime as pr

__all__ = ["ADAPTER", "Settings"]


@attrs.frozen(kw_only=True)
class Settings:
    """Settings of the local-process plugin."""

    root: str | None = pr.plugin.setting(
        default=None, help="Directory for sandboxes and logs (default: a new temp dir)."
    )
    poll_seconds: float = pr.plugin.setting(
        default=0.05,
        exclusive_minimum=0,
        help="How often the event stream looks at the processes (seconds).",
    )
    stop_grace_seconds: float = pr.plugin.setting(
        default=2.0,
        minimum=0,
        help="How long a stopped process may take to end before it is killed (seconds).",
    )


ADAPTER = pr.AdapterInfo(
    name="compat-1.3",
    description="Runs each workload as a local process (written for adapter API 1.3).",
    factory="pando_compat_v1_3._adapter:LocalProcessAdapter",
    config_class=Settings,
    distribution="pando-runtime-compat-1-3",
    api_version="1.3",
)
