"""Fixtures of the Kubernetes adapter's tests: the restricted identity, the harness."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "rbac.yaml"
BINDING = "pando-runtime-tests"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def admin_api(kube_cluster: Any) -> Iterator[Any]:
    """An admin ApiClient (tests only; the adapter never uses the admin identity)."""
    from kubernetes import config  # noqa: PLC0415

    client = config.new_client_from_config(
        config_file=str(kube_cluster.kubeconfig), context=kube_cluster.context
    )
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def adapter_config(kube_cluster: Any, admin_api: Any) -> Iterator[dict[str, Any]]:
    """Settings for an adapter running as the restricted user, bound to exactly our roles."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    if kube_cluster.restricted_kubeconfig is None:
        pytest.skip("the backend has no restricted identity")
    rbac = client.RbacAuthorizationV1Api(admin_api)
    for doc in yaml.safe_load_all(DEPLOY.read_text()):
        try:
            rbac.create_cluster_role(doc)
        except ApiException as error:
            if error.status != 409:
                raise
            rbac.replace_cluster_role(doc["metadata"]["name"], doc)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": BINDING},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "pando-runtime",
        },
        "subjects": [
            {
                "kind": "User",
                "apiGroup": "rbac.authorization.k8s.io",
                "name": kube_cluster.restricted_user,
            }
        ],
    }
    try:
        rbac.create_cluster_role_binding(binding)
    except ApiException as error:
        if error.status != 409:
            raise
    try:
        yield {
            "kubeconfig": str(kube_cluster.restricted_kubeconfig),
            "app_subject": f"User:{kube_cluster.restricted_user}",
            "trust_network_policy": True,
            "schedule_wait": 10.0,
            "dependency_wait": 30.0,
        }
    finally:
        rbac.delete_cluster_role_binding(BINDING)
