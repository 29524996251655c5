"""API paths: of a collection, of one object, and of an object body the adapter writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["api_path", "object_path"]

_OBJECT_PATHS = {
    "Namespace": ("namespaces", ""),
    "Secret": ("secrets", ""),
    "ServiceAccount": ("serviceaccounts", ""),
    "ConfigMap": ("configmaps", ""),
    "Service": ("services", ""),
    "ResourceQuota": ("resourcequotas", ""),
    "Pod": ("pods", ""),
    "NetworkPolicy": ("networkpolicies", "networking.k8s.io/v1"),
    "RoleBinding": ("rolebindings", "rbac.authorization.k8s.io/v1"),
    "PersistentVolumeClaim": ("persistentvolumeclaims", ""),
    "Deployment": ("deployments", "apps/v1"),
    "PodDisruptionBudget": ("poddisruptionbudgets", "policy/v1"),
}


def api_path(ns: str | None, plural: str, name: str | None = None, group: str = "") -> str:
    """The API path of a collection (``name`` unset) or of one object."""
    base = f"/apis/{group}" if group else "/api/v1"
    path = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
    return f"{path}/{name}" if name else path


def object_path(body: Mapping[str, Any], *, named: bool = True) -> str:
    """The path of ``body`` (a kind the adapter writes), or of its collection (``named=False``)."""
    plural, group = _OBJECT_PATHS[body["kind"]]
    meta = body["metadata"]
    return api_path(meta.get("namespace"), plural, meta["name"] if named else None, group)
