"""What the API server's refusal of a call means, and what to do about it.

A call the API server answered with a reason (403 Forbidden, a missing namespace, 401, 422)
fails the same way however often it is retried: "check that the runtime is reachable" would
send the reader the wrong way. :func:`explain` turns such an answer into words and a remedy
that fit: the identity the API server saw and the RBAC rule it lacks (with the ClusterRole of
``deploy/rbac.yaml`` that grants it), the namespace that does not exist and the setting that
names it. Pure: no I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import attrs

from ..api._errors import ApiError

__all__ = ["SHIPPED_ROLES", "Refusal", "explain"]

_RBAC_DENIAL = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]+)")?'
)

_APP = "pando-runtime-app"
_EDGE = "pando-runtime-edge"
_MEMBERSHIP = "pando-runtime-membership"
_CLUSTER = "pando-runtime"
_CATALOG = "pando-runtime-catalog-sync"
_REMOTE_SECRETS = "pando-runtime-remote-secrets"

SHIPPED_ROLES: Mapping[str, tuple[tuple[str, frozenset[str], frozenset[str]], ...]] = {
    _CLUSTER: (
        (
            "",
            frozenset({"namespaces"}),
            frozenset({"get", "list", "watch", "create", "patch", "delete"}),
        ),
        (
            "",
            frozenset({"pods", "services", "nodes", "persistentvolumeclaims"}),
            frozenset({"get", "list", "watch"}),
        ),
        ("", frozenset({"persistentvolumes"}), frozenset({"get", "patch"})),
        (
            "rbac.authorization.k8s.io",
            frozenset({"rolebindings"}),
            frozenset({"get", "create", "patch"}),
        ),
        ("rbac.authorization.k8s.io", frozenset({"clusterroles"}), frozenset({"bind"})),
        ("node.k8s.io", frozenset({"runtimeclasses"}), frozenset({"get", "list"})),
        ("metrics.k8s.io", frozenset({"pods"}), frozenset({"get", "list"})),
    ),
    _APP: (
        (
            "",
            frozenset(
                {
                    "pods",
                    "services",
                    "configmaps",
                    "secrets",
                    "resourcequotas",
                    "persistentvolumeclaims",
                    "serviceaccounts",
                }
            ),
            frozenset({"get", "list", "watch", "create", "update", "patch", "delete"}),
        ),
        ("", frozenset({"pods/log"}), frozenset({"get"})),
        ("", frozenset({"pods/exec"}), frozenset({"create", "get"})),
        (
            "networking.k8s.io",
            frozenset({"networkpolicies"}),
            frozenset({"get", "list", "watch", "create", "update", "patch", "delete"}),
        ),
    ),
    _EDGE: (
        (
            "apps",
            frozenset({"deployments"}),
            frozenset({"get", "list", "watch", "create", "update", "patch", "delete"}),
        ),
        (
            "policy",
            frozenset({"poddisruptionbudgets"}),
            frozenset({"get", "list", "watch", "create", "update", "patch", "delete"}),
        ),
        (
            "",
            frozenset({"services", "secrets", "persistentvolumeclaims"}),
            frozenset({"get", "list", "watch", "create", "update", "patch", "delete"}),
        ),
        ("", frozenset({"pods"}), frozenset({"get", "list", "watch", "create", "delete"})),
        ("", frozenset({"pods/exec"}), frozenset({"create", "get"})),
    ),
    _MEMBERSHIP: (
        (
            "coordination.k8s.io",
            frozenset({"leases"}),
            frozenset({"get", "list", "watch", "create", "update", "delete"}),
        ),
    ),
    _REMOTE_SECRETS: (("", frozenset({"secrets"}), frozenset({"get", "list", "watch"})),),
    _CATALOG: (
        ("", frozenset({"services", "nodes"}), frozenset({"list", "watch"})),
        ("networking.k8s.io", frozenset({"ingresses"}), frozenset({"list", "watch"})),
    ),
}
"""The rules of each ClusterRole the adapter ships in ``deploy/`` (a test holds them equal)."""

_BOUND = {
    _CLUSTER: "deploy/rbac.yaml, bound to the adapter's identity with a ClusterRoleBinding",
    _APP: "deploy/rbac.yaml, which the adapter binds in each app namespace itself when its "
    "'app_subject' setting names this identity",
    _EDGE: "deploy/rbac.yaml, bound with a RoleBinding in the edge namespace ('edge_namespace')",
    _MEMBERSHIP: "deploy/rbac.yaml, bound with a RoleBinding in the host's namespace "
    "('server_namespace')",
    _REMOTE_SECRETS: "deploy/rbac.yaml, bound with a RoleBinding in the namespace of the "
    "remote secrets ('remote_secrets_namespace' of kubernetes-multi)",
    _CATALOG: "deploy/catalog-sync-rbac.yaml, bound with a ClusterRoleBinding to the identity "
    "the catalog sync runs as",
}


@attrs.frozen
class Refusal:
    """Why the API server refused a call (``reason``), what to do (``remedy``), and the facts."""

    reason: str
    remedy: str
    details: dict[str, Any] = attrs.field(factory=dict)


def _roles_granting(group: str, resource: str, verb: str) -> list[str]:
    return [
        role
        for role, rules in SHIPPED_ROLES.items()
        if any(g == group and resource in rs and verb in vs for g, rs, vs in rules)
    ]


def _shipped_role(
    group: str, resource: str, verb: str, namespace: str | None, settings: Mapping[str, str]
) -> str | None:
    """The shipped ClusterRole that grants the verb where it was refused, if one does."""
    roles = _roles_granting(group, resource, verb)
    preferred = {
        "server_namespace": _MEMBERSHIP,
        "edge_namespace": _EDGE,
        "remote_secrets_namespace": _REMOTE_SECRETS,
    }.get(settings.get(namespace or "", ""), _CLUSTER if namespace is None else _APP)
    if preferred in roles:
        return preferred
    return roles[0] if roles else None


def _forbidden(error: ApiError, settings: Mapping[str, str]) -> Refusal:
    denial = _RBAC_DENIAL.search(error.message)
    if denial is None:  # an admission policy, say: its message is the reason
        return Refusal(
            f"the API server refused it (403 Forbidden): {error.message}",
            "The cluster's policy (RBAC or an admission policy) refused this call: grant or "
            "allow it for the adapter's identity, as the message says.",
        )
    user, verb, resource = denial["user"], denial["verb"], denial["resource"]
    group, namespace = denial["group"] or "", denial["namespace"]
    where = f"in namespace {namespace!r}" if namespace else "at the cluster scope"
    kind = f"{resource}.{group}" if group else resource
    rule = f"apiGroups: [{group!r}], resources: [{resource}], verbs: [{verb}]"
    role = _shipped_role(group, resource, verb, namespace, settings)
    shipped = f"the adapter ships it in ClusterRole {role} ({_BOUND[role]}); " if role else ""
    binding = "a RoleBinding in that namespace" if namespace else "a ClusterRoleBinding"
    return Refusal(
        f"the API server refused it (403 Forbidden): {user!r} may not {verb} {kind} {where}",
        f"Grant {user!r} '{verb}' on {kind} {where}: {shipped}or bind a Role with the rule "
        f"({rule}) to it with {binding}.",
        {"identity": user, "verb": verb, "resource": kind, "namespace": namespace, "role": role},
    )


def explain(error: ApiError, settings: Mapping[str, str]) -> Refusal | None:
    """Words and a remedy for a refusal a retry cannot cure; ``None`` for any other failure.

    ``settings``: the namespaces the adapter's settings name, each with its setting's name
    (``{"pando": "server_namespace"}``), so a missing one names the setting to change.
    """
    status = error.status
    if status == HTTPStatus.FORBIDDEN:
        return _forbidden(error, settings)
    if status == HTTPStatus.UNAUTHORIZED:
        return Refusal(
            "the API server did not accept the adapter's credentials (401 Unauthorized)",
            "Check the kubeconfig's user ('kubeconfig', 'context'): its token or certificate "
            "may have expired or been revoked.",
        )
    cause = error.body.get("details") or {}
    if status == HTTPStatus.NOT_FOUND and cause.get("kind") == "namespaces" and cause.get("name"):
        name = str(cause["name"])
        setting = settings.get(name)
        if setting is None:
            return Refusal(
                f"namespace {name!r} does not exist",
                f"Create namespace {name!r} (kubectl create namespace {name}), then retry.",
                {"namespace": name},
            )
        return Refusal(
            f"namespace {name!r} does not exist (the '{setting}' setting names it)",
            f"Create namespace {name!r} (kubectl create namespace {name}), or set "
            f"'{setting}' to a namespace that exists; then retry.",
            {"namespace": name, "setting": setting},
        )
    if status == HTTPStatus.UNPROCESSABLE_ENTITY:
        return Refusal(
            f"the API server found it invalid (422): {error.message}",
            "Check the settings that shape this object (names, labels, images, sizes) "
            "against the message; if they are valid, report a bug with the message.",
        )
    return None
