"""Persistent volumes: requests and the handles that name them."""

from __future__ import annotations

import attrs

__all__ = ["VolumeHandle", "VolumeRequest"]


@attrs.frozen(kw_only=True)
class VolumeRequest:
    """Ask for a volume that belongs to a bundle; ``size_bytes=None`` takes the default."""

    volume_id: str
    bundle_id: str
    name: str
    size_bytes: int | None = None


@attrs.frozen(kw_only=True)
class VolumeHandle:
    """Names a volume in the runtime; ``handle`` is opaque to the host."""

    volume_id: str
    handle: str
