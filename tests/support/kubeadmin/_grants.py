"""The Kubernetes adapter's grants, as its installer binds them (``deploy/rbac.yaml``)."""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec

import yaml

if TYPE_CHECKING:  # the official client loads when used: collecting the tests stays light
    from kubernetes import client

DEPLOY = Path(__file__).resolve().parents[3] / "adapters" / "kubernetes" / "deploy" / "rbac.yaml"
"""The adapter's ClusterRoles, as shipped."""
BINDING = "pando-runtime-tests"
"""The ClusterRoleBinding of the adapter's role to the granted user."""
EDGE_NAMESPACE = "pando-edge"
"""The edge's namespace (the installer makes it and binds the edge's role there)."""
SERVER_NAMESPACE = "pando"
"""The host's namespace, where the replicas' Leases live."""

_P = ParamSpec("_P")


def created(call: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> None:
    """Call a create of the official client; an object that exists already is fine.

    Args:
        call: the create (``CoreV1Api.create_namespace``, ...).
        *args: its arguments.
        **kwargs: its keyword arguments.

    Raises:
        ApiException: any answer but 409 Conflict.
    """
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        call(*args, **kwargs)
    except ApiException as error:
        if error.status != HTTPStatus.CONFLICT:
            raise


def grant_adapter(admin_api: client.ApiClient, user: str) -> None:
    """Bind the adapter's roles (``deploy/rbac.yaml``) to ``user``.

    The cluster-wide role by a ClusterRoleBinding, the edge's in the edge namespace, the
    membership's in the host's (the namespaces and their RoleBindings are the installer's part).
    Run again, it replaces the ClusterRoles with the shipped ones.

    Args:
        admin_api: an admin client of the cluster.
        user: the identity the adapter runs as.
    """
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    rbac = client.RbacAuthorizationV1Api(admin_api)
    for doc in yaml.safe_load_all(DEPLOY.read_text()):
        role = client.V1ClusterRole.model_validate(doc)
        try:
            rbac.create_cluster_role(role)
        except ApiException as error:
            if error.status != HTTPStatus.CONFLICT:
                raise
            rbac.replace_cluster_role(doc["metadata"]["name"], role)
    subjects = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]
    created(
        rbac.create_cluster_role_binding,
        client.V1ClusterRoleBinding.model_validate(
            _binding(BINDING, None, "pando-runtime", subjects)
        ),
    )
    grant_role_in(admin_api, EDGE_NAMESPACE, "pando-runtime-edge", user)
    # The replicas' Leases live in the host's namespace (server_namespace).
    grant_role_in(admin_api, SERVER_NAMESPACE, "pando-runtime-membership", user)


def grant_role_in(admin_api: client.ApiClient, namespace: str, role: str, user: str) -> None:
    """Bind the shipped ClusterRole ``role`` to ``user`` in ``namespace`` only (made if need be).

    The RoleBinding is named after the role, as the installer's (``deploy/README.md``).
    """
    from kubernetes import client  # noqa: PLC0415

    subjects = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]
    core = client.CoreV1Api(admin_api)
    created(core.create_namespace, client.V1Namespace.model_validate(_meta(namespace)))
    created(
        client.RbacAuthorizationV1Api(admin_api).create_namespaced_role_binding,
        namespace,
        client.V1RoleBinding.model_validate(_binding(role, namespace, role, subjects)),
    )


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"metadata": metadata}


def _binding(
    name: str, namespace: str | None, role: str, subjects: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        **_meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }
