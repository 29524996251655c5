"""An example pando-runtime adapter that runs workloads as local processes."""

from __future__ import annotations

from ._info import ADAPTER, LocalProcessConfig

__all__ = ["ADAPTER", "LocalProcessConfig"]
