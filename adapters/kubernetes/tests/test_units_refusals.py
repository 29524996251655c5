"""A refusal the API server gave a reason for is reported with that reason and a remedy that fits.

Pure: the API errors are built as the API server writes them (the cluster tests check the
real answers: ``test_cluster_membership.py``).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pando_runtime_kubernetes._info import KubernetesConfig
from pando_runtime_kubernetes.api._errors import ApiError
from pando_runtime_kubernetes.session._errors import ClusterErrors, named_namespaces
from pando_runtime_kubernetes.session._refusals import SHIPPED_ROLES, explain

from pando_runtime import AdapterFailed, AdapterUnavailable

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
NAMED = named_namespaces(KubernetesConfig())
ROBOT = "system:serviceaccount:hosts:robot"


def _forbidden(verb: str, resource: str, group: str, namespace: str | None) -> ApiError:
    where = f' in the namespace "{namespace}"' if namespace else ""
    message = (
        f'{resource}.{group} is forbidden: User "{ROBOT}" cannot {verb} resource "{resource}" '
        f'in API group "{group}"{where}'
    )
    body = {"kind": "Status", "reason": "Forbidden", "message": message, "code": 403}
    return ApiError(403, "Forbidden", body)


def test_the_shipped_roles_are_those_of_the_deploy_folder() -> None:
    shipped: dict[str, set[tuple[str, frozenset[str], frozenset[str]]]] = {}
    for path in ("rbac.yaml", "catalog-sync-rbac.yaml"):
        for doc in yaml.safe_load_all((DEPLOY / path).read_text()):
            shipped[doc["metadata"]["name"]] = {
                (group, frozenset(rule["resources"]), frozenset(rule["verbs"]))
                for rule in doc["rules"]
                if "resources" in rule
                for group in rule["apiGroups"]
            }
    assert {role: set(rules) for role, rules in SHIPPED_ROLES.items()} == shipped


def test_a_refused_lease_write_names_the_identity_the_verb_and_the_role_it_needs() -> None:
    refusal = explain(_forbidden("create", "leases", "coordination.k8s.io", "pando"), NAMED)
    assert refusal is not None
    assert refusal.reason == (
        f"the API server refused it (403 Forbidden): {ROBOT!r} may not create "
        "leases.coordination.k8s.io in namespace 'pando'"
    )
    assert "ClusterRole pando-runtime-membership" in refusal.remedy
    assert "RoleBinding in the host's namespace ('server_namespace')" in refusal.remedy
    assert "resources: [leases], verbs: [create]" in refusal.remedy
    assert refusal.details["identity"] == ROBOT
    assert refusal.details["role"] == "pando-runtime-membership"


def test_each_refused_verb_points_at_the_role_that_grants_it_where_it_was_refused() -> None:
    def role(verb: str, resource: str, group: str, namespace: str | None) -> object:
        refusal = explain(_forbidden(verb, resource, group, namespace), NAMED)
        assert refusal is not None
        return refusal.details["role"]

    assert role("create", "namespaces", "", None) == "pando-runtime"
    assert role("list", "pods", "", None) == "pando-runtime"
    assert role("create", "pods", "", "app-shop") == "pando-runtime-app"
    assert role("create", "deployments", "apps", "pando-edge") == "pando-runtime-edge"
    assert role("list", "ingresses", "networking.k8s.io", None) == "pando-runtime-catalog-sync"
    assert role("create", "widgets", "example.com", None) is None


def test_a_missing_namespace_is_named_with_the_setting_that_names_it() -> None:
    body = {
        "kind": "Status",
        "reason": "NotFound",
        "message": 'namespaces "pando" not found',
        "details": {"name": "pando", "kind": "namespaces"},
        "code": 404,
    }
    refusal = explain(ApiError(404, "Not Found", body), NAMED)
    assert refusal is not None
    assert (
        refusal.reason
        == "namespace 'pando' does not exist (the 'server_namespace' setting names it)"
    )
    assert "kubectl create namespace pando" in refusal.remedy
    assert "set 'server_namespace'" in refusal.remedy
    other = explain(
        ApiError(404, "Not Found", {**body, "details": {"name": "x", "kind": "namespaces"}}), NAMED
    )
    assert other is not None
    assert "setting" not in other.reason


def test_the_session_reports_refusals_with_their_remedy_and_other_failures_as_before() -> None:
    errors = ClusterErrors("east", NAMED)
    write = errors.failed(_forbidden("create", "leases", "coordination.k8s.io", "pando"), "write")
    assert isinstance(write, AdapterFailed)
    assert write.message.startswith("cluster east: cannot write: the API server refused it")
    assert "pando-runtime-membership" in write.remedy
    assert write.details["status"] == 403
    assert write.details["cluster"] == "east"
    read = errors.unavailable(_forbidden("list", "leases", "coordination.k8s.io", "pando"), "list")
    assert isinstance(read, AdapterUnavailable)
    assert read.remedy != AdapterUnavailable.default_remedy
    down = errors.unavailable(ApiError(0, "connection refused"), "list the leases")
    assert down.remedy == AdapterUnavailable.default_remedy  # nothing answered: that fits
    invalid = errors.failed(
        ApiError(422, "Unprocessable Entity", {"message": "bad label"}), "apply"
    )
    assert "found it invalid (422): bad label" in invalid.message
    assert invalid.remedy != AdapterFailed.default_remedy
