"""The local control plane behaves like a real cluster for what the adapter needs.

Runs against the ``kube_cluster`` fixture (``localcluster.pytest_plugin``). The features of the
simulated nodes (exit codes by annotation, logs from a file, exec on the host, extra nodes) need
the ``local`` backend; the other tests run on any backend.
"""

from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client import ApiException
from kubernetes.stream import stream
from localcluster import EXIT_CODE_ANNOTATION, EXIT_DELAY_ANNOTATION, cri_log_line
from localcluster.backends import KubeCluster

pytestmark = pytest.mark.kube

T = TypeVar("T")
POD_CIDR = ipaddress.ip_network("10.244.0.0/16")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll ``fn`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def gone(read: Callable[[], object]) -> bool:
    """Whether ``read()`` answers 404."""
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def unique(prefix: str) -> str:
    """A DNS-1123 name unique to this test run."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pod_body(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod for fake nodes (nothing runs: kwok only plays its status)."""
    container: dict[str, Any] = {"name": "main", "image": "busybox:stable", "command": ["true"]}
    if requests:
        container["resources"] = {"requests": requests}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {
            "containers": [container],
            "restartPolicy": "Never",
            "nodeSelector": node_selector or {"type": "kwok"},
        },
    }


def phase_is(core: Any, ns: str, name: str, *phases: str) -> Callable[[], Any]:
    """A poll function returning the pod once its phase is one of ``phases``."""

    def check() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in phases else None

    return check


@pytest.fixture
def core(kube_api: Any) -> Any:
    """CoreV1Api on the admin client."""
    return client.CoreV1Api(kube_api)


@pytest.fixture
def local_only(kube_cluster: KubeCluster) -> KubeCluster:
    """Skip unless the cluster is the local one, whose nodes and pods kwok simulates."""
    if kube_cluster.backend != "local":
        pytest.skip(f"needs the local backend's simulated nodes (backend: {kube_cluster.backend})")
    return kube_cluster


@pytest.fixture
def namespace(core: Any) -> Iterator[str]:
    """A fresh namespace, deleted after the test.

    The deletion is not awaited (it takes the namespace controller 5-10 s); that it completes
    is what ``test_namespace_created_and_deleted_to_completion`` checks.
    """
    name = unique("t")
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_namespace_created_and_deleted_to_completion(core: Any, local_only: KubeCluster) -> None:
    name = unique("ns")
    ns = core.create_namespace({"metadata": {"name": name, "labels": {"purpose": "test"}}})
    assert ns.status.phase == "Active"
    core.create_namespaced_config_map(name, {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    core.create_namespaced_pod(name, pod_body("p"))
    wait_for("pod Running", phase_is(core, name, "p", "Running"))

    core.delete_namespace(name)
    assert core.read_namespace(name).status.phase == "Terminating"
    # Needs the namespace controller (KCM) and kwok's pod-delete stage for the pod.
    wait_for("namespace deleted", lambda: gone(lambda: core.read_namespace(name)), 60)
    assert name not in [n.metadata.name for n in core.list_namespace().items]


def test_default_fake_nodes(core: Any, local_only: KubeCluster) -> None:
    nodes = {n.metadata.name: n for n in core.list_node(label_selector="type=kwok").items}
    assert {"kwok-node-0", "kwok-node-1"} <= set(nodes)
    for name in ("kwok-node-0", "kwok-node-1"):
        node = nodes[name]
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert node.status.capacity == {"cpu": "4", "memory": "8Gi", "pods": "110"}
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert len(ready) == 1
        assert ready[0].status == "True"
        assert not node.spec.taints  # the node lifecycle controller saw it Ready


def test_pod_scheduled_onto_fake_node_and_running(
    core: Any, namespace: str, local_only: KubeCluster
) -> None:
    core.create_namespaced_pod(namespace, pod_body("sched"))
    pod = wait_for("pod Running", phase_is(core, namespace, "sched", "Running"))

    assert pod.spec.node_name in ("kwok-node-0", "kwok-node-1")  # chosen by kube-scheduler
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["PodScheduled"] == "True"
    assert conditions["Ready"] == "True"
    assert ipaddress.ip_address(pod.status.pod_ip) in POD_CIDR
    assert pod.status.container_statuses[0].state.running is not None


def test_pod_ends_with_requested_exit_code(
    core: Any, namespace: str, local_only: KubeCluster
) -> None:
    core.create_namespaced_pod(
        namespace, pod_body("fails", annotations={EXIT_CODE_ANNOTATION: "3"})
    )
    delayed = {EXIT_CODE_ANNOTATION: "0", EXIT_DELAY_ANNOTATION: "2000"}
    core.create_namespaced_pod(namespace, pod_body("succeeds", annotations=delayed))

    failed = wait_for("pod Failed", phase_is(core, namespace, "fails", "Failed", "Succeeded"))
    assert failed.status.phase == "Failed"
    terminated = failed.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")

    wait_for("delayed pod Running", phase_is(core, namespace, "succeeds", "Running"))
    running_seen = time.monotonic()
    done = wait_for("pod Succeeded", phase_is(core, namespace, "succeeds", "Succeeded", "Failed"))
    assert done.status.phase == "Succeeded"
    assert done.status.container_statuses[0].state.terminated.exit_code == 0
    assert time.monotonic() - running_seen > 1.0  # the 2000 ms delay was honoured


def test_deployment_pods_created_by_controller_manager(
    kube_api: Any, core: Any, namespace: str, local_only: KubeCluster
) -> None:
    apps: Any = client.AppsV1Api(kube_api)
    labels = {"app": "web"}
    pod = pod_body("ignored", labels=labels)
    template = {"metadata": {"labels": labels}, "spec": pod["spec"]}
    template["spec"]["restartPolicy"] = "Always"
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": labels}, "template": template},
        },
    )

    def ready() -> Any:
        d = apps.read_namespaced_deployment("web", namespace)
        return d if d.status.ready_replicas == 3 else None

    deployment = wait_for("3 ready replicas", ready, 60)
    assert deployment.status.available_replicas == 3
    pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pods) == 3
    for pod in pods:
        assert pod.metadata.owner_references[0].kind == "ReplicaSet"
        assert pod.status.phase == "Running"
        assert pod.spec.node_name.startswith("kwok-node-")


def test_pvc_binds_to_manual_pv(core: Any, namespace: str) -> None:
    # No provisioner runs here: the PV controller of kube-controller-manager binds a PVC to a
    # pre-made PV of the same storageClassName (no StorageClass object is needed).
    pv_name, klass = unique("pv"), unique("manual")
    core.create_persistent_volume(
        {
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": klass,
                "hostPath": {"path": f"/srv/pando-test/{pv_name}"},
            },
        }
    )
    try:
        core.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": klass,
                    "resources": {"requests": {"storage": "500Mi"}},
                },
            },
        )

        def bound() -> Any:
            pvc = core.read_namespaced_persistent_volume_claim("data", namespace)
            return pvc if pvc.status.phase == "Bound" else None

        pvc = wait_for("PVC Bound", bound)
        assert pvc.spec.volume_name == pv_name
        assert pvc.status.capacity["storage"] == "1Gi"
        pv = core.read_persistent_volume(pv_name)
        assert pv.status.phase == "Bound"
        assert (pv.spec.claim_ref.namespace, pv.spec.claim_ref.name) == (namespace, "data")
        core.delete_namespaced_persistent_volume_claim("data", namespace)
        wait_for(
            "PV Released", lambda: core.read_persistent_volume(pv_name).status.phase == "Released"
        )
    finally:
        core.delete_persistent_volume(pv_name)
        wait_for("PV gone", lambda: gone(lambda: core.read_persistent_volume(pv_name)))


def test_logs_and_exec_through_apiserver(
    core: Any, namespace: str, local_only: KubeCluster
) -> None:
    assert local_only.logs_file is not None
    core.create_namespaced_pod(namespace, pod_body("talk"))
    wait_for("pod Running", phase_is(core, namespace, "talk", "Running"))

    marker = unique("hello")
    with local_only.logs_file.open("a") as f:
        f.write(cri_log_line("first line"))
        f.write(cri_log_line(marker))
    logs = core.read_namespaced_pod_log("talk", namespace)
    assert "first line" in logs
    assert marker in logs
    assert core.read_namespaced_pod_log("talk", namespace, tail_lines=1).strip() == marker

    out = stream(
        core.connect_get_namespaced_pod_exec,
        "talk",
        namespace,
        command=["sh", "-c", "echo exec-$KWOK_EXEC; pwd"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    lines = out.split()
    assert lines[0] == "exec-1"  # ran by kwok with the ClusterExec environment
    assert lines[1].endswith("/kwok/exec")


def test_restricted_identity_refused_until_granted(
    kube_cluster: KubeCluster, kube_api: Any, core: Any, namespace: str
) -> None:
    if kube_cluster.restricted_kubeconfig is None or kube_cluster.restricted_user is None:
        pytest.skip(f"the {kube_cluster.backend} backend has no restricted identity")
    kube_config: Any = config  # new_client_from_config is untyped
    restricted = kube_config.new_client_from_config(
        config_file=str(kube_cluster.restricted_kubeconfig)
    )
    # ConfigMaps: the adapter's own ClusterRole, bound to this identity while the adapter's
    # tests run, grants no ConfigMap outside app namespaces, so this holds in any test order.
    try:
        alice: Any = client.CoreV1Api(restricted)
        with pytest.raises(ApiException) as refused:
            alice.list_namespaced_config_map(namespace)
        assert refused.value.status == 403
        assert kube_cluster.restricted_user in str(refused.value.body)

        rbac: Any = client.RbacAuthorizationV1Api(kube_api)
        rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "configmap-reader"},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}
                ],
            },
        )
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "configmap-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "configmap-reader",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "User",
                        "name": kube_cluster.restricted_user,
                    }
                ],
            },
        )

        def allowed() -> bool:
            try:
                alice.list_namespaced_config_map(namespace)
            except ApiException as exc:
                if exc.status != 403:
                    raise
                return False
            return True

        wait_for("RoleBinding to take effect", allowed, 15)
        forbidden_calls: list[Callable[[], object]] = [
            lambda: alice.create_namespaced_pod(namespace, pod_body("nope")),
            lambda: alice.list_namespaced_config_map("default"),
            lambda: alice.list_namespaced_secret(namespace),
        ]
        for forbidden in forbidden_calls:
            with pytest.raises(ApiException) as still:
                forbidden()
            assert still.value.status == 403
    finally:
        restricted.close()


def test_add_node_of_stated_size(core: Any, namespace: str, local_only: KubeCluster) -> None:
    name = unique("big")
    local_only.add_node(name, cpu=16, memory="32Gi", pods=20, labels={"size": "big"})
    try:
        node = core.read_node(name)
        assert node.status.capacity == {"cpu": "16", "memory": "32Gi", "pods": "20"}
        assert node.metadata.labels["type"] == "kwok"
        assert node.metadata.labels["size"] == "big"

        # Only the new node has 8 free CPUs, so the scheduler must put the pod there.
        core.create_namespaced_pod(namespace, pod_body("wide", requests={"cpu": "8"}))
        pod = wait_for("pod Running", phase_is(core, namespace, "wide", "Running"))
        assert pod.spec.node_name == name
        core.delete_namespaced_pod("wide", namespace)  # before its node goes (no 40 s pod GC)
        wait_for("pod gone", lambda: gone(lambda: core.read_namespaced_pod("wide", namespace)))
    finally:
        core.delete_node(name)
