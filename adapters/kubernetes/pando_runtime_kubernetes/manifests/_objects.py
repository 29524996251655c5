"""What an app's objects share, as plain dicts: labels, metadata, and the bytes digests hash.

Builders are pure: same plan in, same bodies out, so server-side apply is a no-op when
nothing changed and the digests can tell "changed" without asking the API server. The
namespace's objects are in ``_namespace_objects``, a workload's in ``_workload_objects``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from .._names import (
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    LABEL_WORKLOAD,
    MANAGED_BY,
    bundle_label,
)

__all__ = [
    "FILES_VOLUME",
    "KEY_FIELD",
    "b64",
    "canonical",
    "labels_for",
    "object_meta",
]

FILES_VOLUME = "pando-files"
"""The pod volume that holds a workload's files."""
KEY_FIELD = "key"
"""The field of the app's key Secret that holds the key."""


def canonical(value: Any) -> bytes:
    """Stable JSON bytes of ``value`` (sorted keys, no spaces): what digests hash."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def b64(data: bytes) -> str:
    """Base64 text of ``data`` (Secret and ConfigMap values)."""
    return base64.b64encode(data).decode()


def labels_for(
    bundle_id: str, workload: str | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Labels of an object of ``bundle_id`` (and ``workload``); ours win over the plan's."""
    labels = dict(extra or {})
    labels[LABEL_MANAGED_BY] = MANAGED_BY
    labels[LABEL_BUNDLE] = bundle_label(bundle_id)
    if workload is not None:
        labels[LABEL_WORKLOAD] = workload
    return labels


def object_meta(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta
