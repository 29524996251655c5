"""Image IDs in one form, whichever image store the engine keeps them in.

The classic store's ID is the digest of the image's config, the containerd store's the digest
of its index or manifest; both are written ``sha256:<hex>`` by ``/images/{name}/json`` and a
container's ``Image``, while a load's answer may name an untagged image by its bare hex or as
``sha256:<HEX>`` from older tools. Every ID the adapter returns or compares goes through
:func:`image_id` first, so the same image is never two strings.
"""

from __future__ import annotations

import re

__all__ = ["image_id"]

_ID = re.compile(r"^(?:sha256:)?([0-9a-fA-F]{64})$")


def image_id(value: str | None) -> str | None:
    """``sha256:<lower-case hex>`` for an image ID in any digest form; ``None`` for others."""
    found = _ID.match(value or "")
    return f"sha256:{found[1].lower()}" if found else None
