"""Names, labels and annotations the adapter writes (the anchor's vocabulary).

Everything the adapter creates carries ``app.kubernetes.io/managed-by=pando``,
so one label selector finds all of it and nothing else.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import string

from pando_runtime import Upstream, WorkloadRef

__all__ = [
    "ANN_BUNDLE_ID",
    "ANN_CREATED",
    "ANN_EDGE_DIGEST",
    "ANN_EDGE_NAME",
    "ANN_EDGE_VOLUMES",
    "ANN_EXPOSED",
    "ANN_FENCE",
    "ANN_NS_DIGEST",
    "ANN_PLAN_DIGEST",
    "ANN_VOLUMES_ONLY",
    "ANN_VOLUME_ID",
    "ANN_VOLUME_NAME",
    "ANN_WORKLOADS",
    "ANN_WRITTEN_UNDER",
    "CONFIGMAP_PREFIX",
    "DEFAULT_SERVICE_ACCOUNT",
    "ENV_SECRET_PREFIX",
    "EXPOSURE_POLICY_PREFIX",
    "KEY_SECRET",
    "LABEL_BUNDLE",
    "LABEL_EDGE",
    "LABEL_MANAGED_BY",
    "LABEL_ROLE",
    "LABEL_VOLUME",
    "LABEL_WORKLOAD",
    "MANAGED_BY",
    "MANAGED_SELECTOR",
    "NAMESPACE_PREFIX",
    "NETWORK_POLICY",
    "PULL_SECRET",
    "QUOTA",
    "ROLE_BINDING",
    "ROLE_CANARY",
    "ROLE_EDGE",
    "ROLE_EGRESS_GATEWAY",
    "ROLE_TRIAL",
    "ROLE_VOLUME_HELPER",
    "bundle_label",
    "claim_name",
    "configmap_name",
    "edge_object_name",
    "env_secret_name",
    "exposure_policy_name",
    "helper_name",
    "namespace_for",
    "pod_name",
    "trial_namespace",
    "upstream_for",
]

MANAGED_BY = "pando"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
LABEL_BUNDLE = "pando.dev/bundle"
LABEL_WORKLOAD = "pando.dev/workload"
LABEL_ROLE = "pando.dev/role"
"""Marks helper objects (canary, gateway...) that are not part of any workload."""
LABEL_VOLUME = "pando.dev/volume"
LABEL_EDGE = "pando.dev/edge"
ROLE_VOLUME_HELPER = "volume-helper"
ROLE_TRIAL = "trial"
ROLE_CANARY = "network-policy-canary"
ROLE_EGRESS_GATEWAY = "egress-gateway"
ROLE_EDGE = "edge"
"""Carried by every edge pod (with the managed-by label): what app policies admit of the edge."""

ANN_BUNDLE_ID = "pando.dev/bundle-id"
"""The bundle id in its original case (the label and namespace are lowercased)."""
ANN_PLAN_DIGEST = "pando.dev/plan-digest"
ANN_CREATED = "pando.dev/created"
"""Nanoseconds since the epoch when the adapter made the pod: the newest pod wins."""
ANN_WORKLOADS = "pando.dev/workloads"
"""On the namespace: the plan's workload names, so observe lists stopped ones too."""
ANN_NS_DIGEST = "pando.dev/namespace-digest"
"""On the namespace: digest of the namespace-wide objects last applied."""
ANN_EXPOSED = "pando.dev/exposed"
"""On the namespace: ``<workload>=<digest>`` of each exposure policy written, comma-separated
(an empty digest: the policy may be there, and is to be rewritten or deleted)."""
ANN_VOLUMES_ONLY = "pando.dev/volumes-only"
"""On the namespace: the app is destroyed (or not applied yet); only its volumes are kept."""
ANN_FENCE = "pando.dev/fence"
"""On an app namespace, once a member of a membership wrote it: ``<epoch>/<replica>``, the
ownership writes must carry (deploy/admission.yaml refuses the others); the epoch only grows."""
ANN_WRITTEN_UNDER = "pando.dev/written-under"
"""On each object a member writes: the namespace's fence it was written under."""
ANN_VOLUME_ID = "pando.dev/volume-id"
"""On a claim: the volume id in its original case."""
ANN_VOLUME_NAME = "pando.dev/volume-name"
ANN_EDGE_NAME = "pando.dev/edge-name"
ANN_EDGE_DIGEST = "pando.dev/edge-digest"
"""On an edge's Deployment: HMAC of the edge plan under the edge's own key."""
ANN_EDGE_VOLUMES = "pando.dev/edge-volumes"
"""On an edge's Deployment: the volume ids it mounts, comma-separated."""

NAMESPACE_PREFIX = "pando-"
NETWORK_POLICY = "pando-default"
QUOTA = "pando-quota"
PULL_SECRET = "pando-pull"  # noqa: S105 - a name, not a secret
KEY_SECRET = "pando-plan-key"  # noqa: S105 - a name, not a secret
ROLE_BINDING = "pando-app-manager"
DEFAULT_SERVICE_ACCOUNT = "default"
ENV_SECRET_PREFIX = "pando-env-"  # noqa: S105 - a name, not a secret
CONFIGMAP_PREFIX = "pando-files-"
EXPOSURE_POLICY_PREFIX = "pando-expose-"

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


def exposure_policy_name(workload: str) -> str:
    """The NetworkPolicy admitting the host's proxy and the edge to an exposed workload."""
    return EXPOSURE_POLICY_PREFIX + workload


def pod_name(workload: str, digest: str, replaces: str | None) -> str:
    """The pod name ``<workload>-<8 chars>`` of one instance, derived, never random.

    The suffix hashes the workload, its plan digest and the uid of the instance it
    replaces (``None`` for none), so two writers looking at the same state choose the
    same name and the API server refuses the second create; a re-start of an ended
    instance (same plan) replaces that instance, so its name differs and the ended
    pod stays readable.
    """
    seed = hashlib.sha256(f"{workload}\n{digest}\n{replaces or ''}".encode()).digest()
    number = int.from_bytes(seed[:8])
    chars = []
    for _ in range(8):
        number, index = divmod(number, len(_SUFFIX_ALPHABET))
        chars.append(_SUFFIX_ALPHABET[index])
    return f"{workload[:54]}-{''.join(chars)}"


def _bounded(prefix: str, name: str, limit: int = 63) -> str:
    """``prefix + name``, shortened with a hash suffix when longer than ``limit``."""
    full = prefix + name
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[: limit - 9].rstrip('-')}-{digest}"


def claim_name(volume_id: str) -> str:
    """The PersistentVolumeClaim of a volume: ``pando-vol-`` + id lowercased, a-z0-9 and ``-``."""
    return _bounded("pando-vol-", _NON_ALNUM.sub("-", volume_id.lower()))


def helper_name(claim: str) -> str:
    """A fresh volume helper pod name for a claim (a new one per run)."""
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
    return _bounded("pando-volume-helper-", claim.removeprefix("pando-vol-"), 57) + "-" + suffix


def trial_namespace(trial_id: str) -> str:
    """The namespace of one trial run."""
    return _bounded("pando-trial-", _NON_ALNUM.sub("-", trial_id.lower()))


def edge_object_name(name: str) -> str:
    """The Deployment, Service and PodDisruptionBudget of an edge."""
    return _bounded("pando-edge-", name, 52)  # leaves room for a ReplicaSet's pod suffix


assert set(_SUFFIX_ALPHABET) <= set(string.ascii_lowercase + string.digits)  # noqa: S101


def upstream_for(ref: WorkloadRef, port: int, cluster_domain: str) -> Upstream:
    """``http://<workload>.<namespace>.svc.<cluster domain>:<port>``: its headless Service."""
    host = f"{ref.workload}.{namespace_for(ref.bundle_id)}.svc.{cluster_domain}"
    return Upstream(url=f"http://{host}:{port}", pool_key=f"{host}:{port}")
