"""What ``available_adapters()`` reads: no adapter code is imported from here."""

from __future__ import annotations

import attrs

import pando_runtime as pr

__all__ = ["ADAPTER", "LocalProcessConfig"]


@attrs.frozen(kw_only=True)
class LocalProcessConfig:
    """Settings of the local-process adapter."""

    root: str | None = pr.plugin.setting(
        default=None, help="Directory for sandboxes, logs and volumes (default: a new temp dir)."
    )
    poll_seconds: float = pr.plugin.setting(
        default=0.05,
        exclusive_minimum=0,
        help="How often the event stream looks at the processes (seconds).",
    )
    stop_grace_seconds: float = pr.plugin.setting(
        default=2.0,
        minimum=0,
        help="How long a stopped process may take to end before it is killed (seconds; "
        "0: no grace).",
    )


ADAPTER = pr.AdapterInfo(
    name="localproc",
    description="Runs each workload as a local process (an example third-party adapter).",
    factory="pando_runtime_localproc._adapter:LocalProcessAdapter",
    api_version="1.7",
    config_class=LocalProcessConfig,
    distribution="pando-runtime-localproc",
)
