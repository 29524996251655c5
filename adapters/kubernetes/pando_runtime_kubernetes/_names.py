"""Names, labels and annotations the adapter writes (the anchor's vocabulary).

Everything the adapter creates carries ``app.kubernetes.io/managed-by=pando``,
so one label selector finds all of it and nothing else.
"""

from __future__ import annotations

import re
import secrets
import string

__all__ = [
    "ANN_BUNDLE_ID",
    "ANN_CREATED",
    "ANN_NS_DIGEST",
    "ANN_PLAN_DIGEST",
    "ANN_WORKLOADS",
    "CONFIGMAP_PREFIX",
    "ENV_SECRET_PREFIX",
    "KEY_SECRET",
    "LABEL_BUNDLE",
    "LABEL_MANAGED_BY",
    "LABEL_ROLE",
    "LABEL_WORKLOAD",
    "MANAGED_BY",
    "MANAGED_SELECTOR",
    "NAMESPACE_PREFIX",
    "NETWORK_POLICY",
    "PULL_SECRET",
    "QUOTA",
    "ROLE_BINDING",
    "bundle_label",
    "configmap_name",
    "env_secret_name",
    "namespace_for",
    "pod_name",
]

MANAGED_BY = "pando"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
LABEL_BUNDLE = "pando.dev/bundle"
LABEL_WORKLOAD = "pando.dev/workload"
LABEL_ROLE = "pando.dev/role"
"""Marks helper objects (canary, gateway...) that are not part of any workload."""

ANN_BUNDLE_ID = "pando.dev/bundle-id"
"""The bundle id in its original case (the label and namespace are lowercased)."""
ANN_PLAN_DIGEST = "pando.dev/plan-digest"
ANN_CREATED = "pando.dev/created"
"""Nanoseconds since the epoch when the adapter made the pod: the newest pod wins."""
ANN_WORKLOADS = "pando.dev/workloads"
"""On the namespace: the plan's workload names, so observe lists stopped ones too."""
ANN_NS_DIGEST = "pando.dev/namespace-digest"
"""On the namespace: digest of the namespace-wide objects last applied."""

NAMESPACE_PREFIX = "pando-"
NETWORK_POLICY = "pando-default"
QUOTA = "pando-quota"
PULL_SECRET = "pando-pull"  # noqa: S105 - a name, not a secret
KEY_SECRET = "pando-plan-key"  # noqa: S105 - a name, not a secret
ROLE_BINDING = "pando-app-manager"
ENV_SECRET_PREFIX = "pando-env-"  # noqa: S105 - a name, not a secret
CONFIGMAP_PREFIX = "pando-files-"

_NON_ALNUM = re.compile(r"[^a-z0-9]")
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' own: no vowels, no look-alikes


def namespace_for(bundle_id: str) -> str:
    """The namespace of a bundle: ``pando-`` + id lowercased, other than a-z0-9 -> ``-``.

    >>> namespace_for("app_01HQ8ABC")
    'pando-app-01hq8abc'
    """
    return NAMESPACE_PREFIX + _NON_ALNUM.sub("-", bundle_id.lower())


def bundle_label(bundle_id: str) -> str:
    """The bundle id as a label value (validated ids are already valid label values)."""
    return bundle_id


def env_secret_name(workload: str) -> str:
    """The Secret holding a workload's environment."""
    return ENV_SECRET_PREFIX + workload


def configmap_name(workload: str) -> str:
    """The ConfigMap holding a workload's carried files."""
    return CONFIGMAP_PREFIX + workload


def pod_name(workload: str) -> str:
    """A fresh pod name ``<workload>-<5 chars>`` (a new one per instance)."""
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
    return f"{workload[:57]}-{suffix}"


assert set(_SUFFIX_ALPHABET) <= set(string.ascii_lowercase + string.digits)  # noqa: S101
