"""The egress gateway: a forward proxy that lets an app reach the host names its plan allows.

Host-name rules cannot be NetworkPolicies (those match addresses, and a name's addresses
change), so an app whose plan names hosts gets a gateway in its namespace: one Squid pod
(bare, as app pods are: apply replaces it when it ended or its configuration changed), its
Service and a ConfigMap holding ``squid.conf``. The app's pods get
``HTTPS_PROXY``/``HTTP_PROXY`` pointing at it, and their policy lets them reach only the
gateway outside their namespace (and DNS and the plan's CIDR rules); only the gateway's
policy reaches the internet, on the rules' ports.

Why Squid: it is the forward proxy Debian (and every distribution) packages and maintains,
it matches CONNECT tunnels and plain HTTP requests alike on host name and port (``dstdomain``
and ``port`` ACLs), answers 403 to the rest, can refuse by destination address after its
own DNS lookup (so a permitted name that resolves into the cluster is still refused), and
runs in the foreground with its whole configuration in one file. The configuration matches
names without reverse lookups (``dstdomain -n``), so an address literal never passes as a
name. The pod's image is the ``egress_gateway_image`` setting: any image with ``squid`` on
its ``PATH`` (Debian's package, for one).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pando_runtime import EgressPolicy, EgressRule
from pando_runtime.plugin import squid_config as _squid_config

from .._names import (
    ANN_CREATED,
    ANN_PLAN_DIGEST,
    LABEL_BUNDLE,
    LABEL_ROLE,
    ROLE_EGRESS_GATEWAY,
    bundle_label,
    pod_name,
)
from ._egress import ClusterRanges, host_rules
from ._security import container_security, pod_security

__all__ = [
    "CONFIG_KEY",
    "GATEWAY",
    "GATEWAY_PORT",
    "config_digest",
    "gateway_config",
    "gateway_objects",
    "gateway_pod",
    "proxy_env",
    "squid_config",
]

GATEWAY = "pando-egress-gateway"
"""The name of the gateway's Service and ConfigMap (and the stem of its pods' names)."""
GATEWAY_PORT = 3128
CONFIG_KEY = "squid.conf"
CONFIG_DIR = "/etc/pando-gateway"


def squid_config(
    rules: Sequence[EgressRule], excluded: Sequence[str], *, listen: str = str(GATEWAY_PORT)
) -> str:
    """``squid.conf`` allowing exactly ``rules`` (the core's ``plugin.squid_config``).

    Host names only: CIDR rules are the policy's. A listed name resolving into ``excluded``
    is refused. ``listen`` is Squid's ``http_port`` (a port, or ``address:port``).
    """
    return _squid_config(rules, listen=listen, refused=excluded)


def proxy_env(
    ns: str, cluster_domain: str, egress: EgressPolicy | None, workloads: Sequence[str]
) -> dict[str, str]:
    """The proxy variables of an app's pods; empty when the plan names no host.

    ``NO_PROXY`` keeps the app's own names, loopback and its CIDR rules off the proxy.
    Both spellings are set: curl and Python read the lower-case ones, Go both.
    """
    if not host_rules(egress):
        return {}
    url = f"http://{GATEWAY}.{ns}.svc.{cluster_domain}:{GATEWAY_PORT}"
    direct = [
        "localhost",
        "127.0.0.1",
        "::1",
        *workloads,
        f".{ns}.svc",
        f".{ns}.svc.{cluster_domain}",
    ]
    if egress is not None:
        direct += [r.destination for r in egress.allow if r.is_cidr]
    no_proxy = ",".join(direct)
    env = {"HTTPS_PROXY": url, "HTTP_PROXY": url, "NO_PROXY": no_proxy}
    return {**env, **{k.lower(): v for k, v in env.items()}}


def _labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {**labels, LABEL_ROLE: ROLE_EGRESS_GATEWAY}


def gateway_config(egress: EgressPolicy | None, ranges: ClusterRanges) -> str | None:
    """The gateway's ``squid.conf`` for a plan; ``None`` when no rule names a host."""
    rules = host_rules(egress)
    return squid_config(rules, ranges.excluded) if rules else None


def config_digest(config: str) -> str:
    """The digest a gateway pod carries of the configuration it runs (it names the pod)."""
    return hashlib.sha256(config.encode()).hexdigest()


def gateway_objects(
    ns: str, bundle_id: str, config: str, *, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The gateway's Service and ConfigMap (its pod is converged apart, as app pods are)."""
    meta = {"name": GATEWAY, "namespace": ns, "labels": _labels(labels)}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(bundle_id),
            "ports": [
                {
                    "name": "proxy",
                    "port": GATEWAY_PORT,
                    "targetPort": GATEWAY_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": dict(meta),
        "data": {CONFIG_KEY: config},
    }
    return [service, configmap]


def _selector(bundle_id: str) -> dict[str, str]:
    return {LABEL_BUNDLE: bundle_label(bundle_id), LABEL_ROLE: ROLE_EGRESS_GATEWAY}


def gateway_pod(
    ns: str,
    digest: str,
    *,
    image: str,
    labels: Mapping[str, str],
    placement: Mapping[str, Any],
    replaces: str | None,
    created_ns: int | None = None,
) -> dict[str, Any]:
    """The gateway's bare pod, as an app pod is: never restarted, replaced by apply.

    Its name derives from the configuration's ``digest`` (and the instance it replaces), so
    a changed allow-list makes a new pod and two writers make one. ``placement`` is merged
    into the spec (RuntimeClass, node selector).
    """
    container = {
        "name": "squid",
        "image": image,
        "command": ["squid", "-N", "-f", f"{CONFIG_DIR}/{CONFIG_KEY}"],
        "ports": [{"containerPort": GATEWAY_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": GATEWAY_PORT}, "periodSeconds": 5},
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "securityContext": container_security(),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": GATEWAY}}],
        "securityContext": pod_security(),
        **placement,
    }
    annotations = {
        ANN_PLAN_DIGEST: digest,
        ANN_CREATED: str(created_ns if created_ns is not None else time.time_ns()),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(GATEWAY, digest, replaces),
            "namespace": ns,
            "labels": _labels(labels),
            "annotations": annotations,
        },
        "spec": spec,
    }
