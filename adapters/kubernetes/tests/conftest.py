"""Fixtures of the Kubernetes adapter's tests: the restricted identity, the harness.

Each cluster's part (admin client, volume pool, the adapter's grants) is a context manager of
its own, so the second cluster of the many-cluster tests is prepared as the first is.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubeadmin import BINDING, EDGE_NAMESPACE, admin_client, created, grant_adapter

STORAGE_CLASS = "pando-test-manual"
POOL_LABEL = "pando-runtime-tests/pool"
POOL_SIZE = 48


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _admin_client(cluster: Any) -> contextlib.AbstractContextManager[Any]:
    return admin_client(cluster.kubeconfig, context=cluster.context)


@pytest.fixture(scope="session")
def admin_api(kube_cluster: Any) -> Iterator[Any]:
    """An admin ApiClient (tests only; the adapter never uses the admin identity)."""
    with _admin_client(kube_cluster) as client:
        yield client


@pytest.fixture(scope="session")
def second_admin_api(second_kube_cluster: Any) -> Iterator[Any]:
    """An admin ApiClient of the second cluster."""
    with _admin_client(second_kube_cluster) as client:
        yield client


@contextlib.contextmanager
def _volume_pool(admin_api: Any, root: Path) -> Iterator[Path]:
    """Pre-provisioned volumes, as on a cluster without a dynamic provisioner.

    The local control plane has no provisioner: an administrator's pool of hostPath
    PersistentVolumes of a manual StorageClass (binding Immediate) is what claims bind to.
    Destroyed volumes are set to Delete; with no deleter for hostPath the PV goes Failed and
    is removed here. Returns the directory where the volume helper mounts claims: kwok runs
    exec on this machine, so the helper's ``tar`` runs here, on ``<dir>/<claim>``.
    """
    from kubernetes import client  # noqa: PLC0415

    pool = root.name
    core = client.CoreV1Api(admin_api)
    storage = client.StorageV1Api(admin_api)
    created(
        storage.create_storage_class,
        {
            "metadata": {"name": STORAGE_CLASS},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Retain",
        },
    )
    for i in range(POOL_SIZE):
        core.create_persistent_volume(
            {
                "metadata": {"name": f"pando-test-{pool}-{i:02d}", "labels": {POOL_LABEL: pool}},
                "spec": {
                    "capacity": {"storage": "20Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": STORAGE_CLASS,
                    "hostPath": {
                        "path": str(root / "pv" / f"{i:02d}"),
                        "type": "DirectoryOrCreate",
                    },
                },
            }
        )
    try:
        yield root / "mounts"
    finally:
        core.delete_collection_persistent_volume(label_selector=f"{POOL_LABEL}={pool}")


@pytest.fixture(scope="session")
def volume_pool(
    kube_cluster: Any, admin_api: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The first cluster's volume pool (see :func:`_volume_pool`)."""
    with _volume_pool(admin_api, tmp_path_factory.mktemp("volumes")) as mounts:
        yield mounts


@pytest.fixture(scope="session")
def second_volume_pool(
    second_admin_api: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The second cluster's volume pool (its own host directories)."""
    with _volume_pool(second_admin_api, tmp_path_factory.mktemp("volumes")) as mounts:
        yield mounts


@contextlib.contextmanager
def _granted(cluster: Any, admin_api: Any, volume_pool: Path) -> Iterator[dict[str, Any]]:
    """Settings for an adapter running as the cluster's restricted user, bound to our roles."""
    from kubernetes import client  # noqa: PLC0415

    if cluster.restricted_kubeconfig is None:
        pytest.skip("the backend has no restricted identity")
    grant_adapter(admin_api, cluster.restricted_user)
    rbac = client.RbacAuthorizationV1Api(admin_api)
    try:
        yield {
            "kubeconfig": str(cluster.restricted_kubeconfig),
            "app_subject": f"User:{cluster.restricted_user}",
            "trust_network_policy": True,
            "schedule_wait": 10.0,
            "dependency_wait": 30.0,
            "storage_class": STORAGE_CLASS,
            "helper_mount_root": str(volume_pool),
            "helper_wait": 30.0,
            "edge_namespace": EDGE_NAMESPACE,
            # No load balancer controller here: a LoadBalancer Service would never get an address.
            "edge_service_type": "NodePort",
        }
    finally:
        rbac.delete_cluster_role_binding(BINDING)


@pytest.fixture(scope="session")
def adapter_config(
    kube_cluster: Any, admin_api: Any, volume_pool: Path
) -> Iterator[dict[str, Any]]:
    """Settings for an adapter running as the restricted user, bound to exactly our roles."""
    with _granted(kube_cluster, admin_api, volume_pool) as settings:
        yield settings


@pytest.fixture(scope="session")
def second_adapter_config(
    second_kube_cluster: Any, second_admin_api: Any, second_volume_pool: Path
) -> Iterator[dict[str, Any]]:
    """The same for the second cluster (its restricted user, its roles, its volume pool)."""
    with _granted(second_kube_cluster, second_admin_api, second_volume_pool) as settings:
        yield settings


def _current_context(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["current-context"])


@pytest.fixture(scope="session")
def multi_config(
    kube_cluster: Any,
    second_kube_cluster: Any,
    adapter_config: dict[str, Any],
    second_adapter_config: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """Settings of a multi-cluster adapter over both clusters, each as its restricted user.

    One kubeconfig holds both contexts; the default cluster is the second (small) one, so a
    bundle that is not a first deploy goes there and placement by room has to pick the first.
    """
    from localcluster.kubeconfig import merge_kubeconfigs  # noqa: PLC0415

    sources = [Path(adapter_config["kubeconfig"]), Path(second_adapter_config["kubeconfig"])]
    first, second = (_current_context(s) for s in sources)
    path = merge_kubeconfigs(tmp_path_factory.mktemp("fleet") / "kubeconfig", sources)
    per_member = ("kubeconfig", "helper_mount_root")
    return {
        "kubeconfig": str(path),
        "contexts": [first, second],
        "default_cluster": second,
        "settings": {k: v for k, v in adapter_config.items() if k not in per_member},
        "clusters": {
            first: {"helper_mount_root": adapter_config["helper_mount_root"]},
            second: {"helper_mount_root": second_adapter_config["helper_mount_root"]},
        },
    }


@pytest.fixture(scope="session")
def multi_hooks(
    kube_cluster: Any,
    second_kube_cluster: Any,
    admin_api: Any,
    second_admin_api: Any,
    multi_config: dict[str, Any],
) -> dict[str | None, Any]:
    """The conformance harness's hooks of each member, by member name."""
    from _kube_harness import ClusterHooks  # noqa: PLC0415

    first, second = multi_config["contexts"]
    return {
        first: ClusterHooks(admin_api, kube_cluster.logs_file),
        second: ClusterHooks(second_admin_api, second_kube_cluster.logs_file),
    }


# -- the conformance kit's adapters: through a fault proxy, so their cache can really go stale ----

CONFORMANCE_CACHE = {"cache_max_staleness": 2.0, "cache_probe_interval": 0.5}
"""The conformance adapters' cache bounds: a cut-off cache is refused within seconds (the kit's
stale-cache test waits that long), and a silent one is probed twice a second meanwhile."""


@pytest.fixture(scope="session")
def toxiproxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Toxiproxy for the session: the conformance adapters reach their API servers through it."""
    from localcluster import ToxiproxyServer  # noqa: PLC0415

    with ToxiproxyServer(log_dir=tmp_path_factory.mktemp("toxiproxy")) as server:
        yield server


@pytest.fixture(scope="session")
def apiserver_proxy(kube_cluster: Any, request: pytest.FixtureRequest) -> Any:
    """The first cluster's API server behind a Toxiproxy proxy (``None`` unless local).

    Only the adapters given its kubeconfig go through it: disabling it cuts them off while the
    API server itself, and every other client, carries on. On another backend there is none:
    the harness then lacks the cache hooks and their tests skip, saying so.
    """
    from localcluster import proxy_apiserver  # noqa: PLC0415

    if kube_cluster.local is None:
        return None
    server = request.getfixturevalue("toxiproxy_server")
    # One proxy per cluster of the session: the older minor's cluster comes after the newest's
    # on the same Toxiproxy server, which keeps the first proxy.
    minor = kube_cluster.local.minor
    return proxy_apiserver(
        kube_cluster.local, server, name=f"apiserver-{minor}" if minor else "apiserver"
    )


@pytest.fixture(scope="session")
def second_apiserver_proxy(second_kube_cluster: Any, toxiproxy_server: Any) -> Any:
    """The second cluster's API server behind a proxy of its own (it is always local)."""
    from localcluster import proxy_apiserver  # noqa: PLC0415

    return proxy_apiserver(second_kube_cluster.local, toxiproxy_server, name="apiserver-2")


def _through(config: dict[str, Any], proxy: Any) -> dict[str, Any]:
    if proxy is None:
        return config
    return {**config, "kubeconfig": str(proxy.restricted_kubeconfig), **CONFORMANCE_CACHE}


@pytest.fixture(scope="session")
def conformance_config(adapter_config: dict[str, Any], apiserver_proxy: Any) -> dict[str, Any]:
    """:func:`adapter_config` through the proxy, with :data:`CONFORMANCE_CACHE`."""
    return _through(adapter_config, apiserver_proxy)


@pytest.fixture(scope="session")
def multi_conformance_config(
    multi_config: dict[str, Any],
    apiserver_proxy: Any,
    second_apiserver_proxy: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """:func:`multi_config` with each member through its proxy, with :data:`CONFORMANCE_CACHE`."""
    from localcluster.kubeconfig import merge_kubeconfigs  # noqa: PLC0415

    proxies = (apiserver_proxy, second_apiserver_proxy)
    if None in proxies:
        return multi_config
    sources = [Path(p.restricted_kubeconfig) for p in proxies]
    assert [_current_context(s) for s in sources] == multi_config["contexts"]
    path = merge_kubeconfigs(tmp_path_factory.mktemp("fleet-proxied") / "kubeconfig", sources)
    settings = {**multi_config["settings"], **CONFORMANCE_CACHE}
    return {**multi_config, "kubeconfig": str(path), "settings": settings}


@pytest.fixture(scope="session")
def multi_conformance_hooks(
    multi_hooks: dict[str | None, Any], apiserver_proxy: Any, second_apiserver_proxy: Any
) -> dict[str | None, Any]:
    """:func:`multi_hooks`, each member's with its proxy."""
    first, second = multi_hooks
    return {
        first: dataclasses.replace(multi_hooks[first], proxy=apiserver_proxy),
        second: dataclasses.replace(multi_hooks[second], proxy=second_apiserver_proxy),
    }


# -- the cluster with a real node: containers run, policies are enforced ------------------------


@pytest.fixture(scope="session")
def real_admin_api(real_node_cluster: Any) -> Iterator[Any]:
    """An admin ApiClient of the cluster with a real node."""
    with _admin_client(real_node_cluster) as client:
        yield client


@pytest.fixture(scope="session")
def real_volume_pool(
    real_admin_api: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The real-node cluster's volume pool: hostPath volumes kubelet really mounts."""
    with _volume_pool(real_admin_api, tmp_path_factory.mktemp("real-volumes")) as mounts:
        yield mounts


@pytest.fixture(scope="session")
def real_adapter_config(
    real_node_cluster: Any, real_admin_api: Any, real_volume_pool: Path
) -> Iterator[dict[str, Any]]:
    """Settings of an adapter whose apps run on the real node, as the restricted user.

    No ``trust_*`` setting: the canary finds out what the cluster enforces. The cluster's
    ranges are named, as an operator would name them, so the app's default policy lets the
    stand-in internet through and keeps the pod, Service and API server ranges out.
    """
    from localcluster.realnode import network  # noqa: PLC0415

    with _real_settings(
        real_node_cluster, real_admin_api, real_volume_pool, network.POD_CIDR
    ) as settings:
        yield settings


@contextlib.contextmanager
def _real_settings(
    cluster: Any, admin_api: Any, volume_pool: Path, pod_cidr: str
) -> Iterator[dict[str, Any]]:
    from localcluster import images  # noqa: PLC0415
    from localcluster.realnode import addons, network  # noqa: PLC0415

    registry = cluster.local.registry
    with _granted(cluster, admin_api, volume_pool) as granted:
        settings = {k: v for k, v in granted.items() if not k.startswith("trust_")}
        yield {
            **settings,
            **registry.adapter_settings(),
            "runtime_class": addons.RUNTIME_CLASS,
            "helper_image": images.WORKLOAD,
            "helper_mount_root": "/data",
            "egress_gateway_image": images.GATEWAY,
            "pod_cidr": pod_cidr,
            "service_cidr": "10.96.0.0/16",
            "api_server_cidr": f"{network.API_SERVER_IP}/32",
            "node_cidr": network.LINK_CIDR,
            "dns_namespace": addons.DNS_NAMESPACE,
            "dns_labels": dict(addons.DNS_LABELS),
            "schedule_wait": 30.0,
            "canary_wait": 60.0,
        }


# -- the cluster with two real nodes: pods on both, one of them cut off ------------------------


@pytest.fixture(scope="session")
def two_nodes_admin_api(two_real_nodes_cluster: Any) -> Iterator[Any]:
    """An admin ApiClient of the cluster with two real nodes."""
    with _admin_client(two_real_nodes_cluster) as client:
        yield client


@pytest.fixture(scope="session")
def two_nodes_adapter_config(
    two_real_nodes_cluster: Any, two_nodes_admin_api: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """As :func:`real_adapter_config` on the cluster with two real nodes: the pod range named
    is the cluster's (every node's); no volume pool (no test of volumes runs there)."""
    from localcluster.realnode import network  # noqa: PLC0415

    pool = tmp_path_factory.mktemp("two-nodes-volumes")
    with _real_settings(
        two_real_nodes_cluster, two_nodes_admin_api, pool, network.POD_RANGE
    ) as settings:
        yield settings


@pytest.fixture
async def two_nodes_adapter(two_nodes_adapter_config: dict[str, Any]) -> AsyncIterator[Any]:
    """An adapter whose apps run on the two real nodes."""
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    async with KubernetesAdapter(two_nodes_adapter_config) as adapter:
        yield adapter


@pytest.fixture(scope="session")
def real_apiserver_proxy(real_node_cluster: Any, toxiproxy_server: Any) -> Any:
    """The real-node cluster's API server behind a Toxiproxy proxy of its own (it is local)."""
    from localcluster import proxy_apiserver  # noqa: PLC0415

    return proxy_apiserver(real_node_cluster.local, toxiproxy_server, name="apiserver-real")


@pytest.fixture(scope="session")
def real_conformance_config(
    real_adapter_config: dict[str, Any], real_apiserver_proxy: Any
) -> dict[str, Any]:
    """:func:`real_adapter_config` through the proxy, with :data:`CONFORMANCE_CACHE`.

    ``trust_network_policy`` skips the canary (kube-router does enforce NetworkPolicy): each
    test's fresh adapter would run it at its first ``capabilities()``. Egress then stays
    unverified, so the whole kit sees restricted egress refused; the egress suite runs on an
    adapter whose canary looked (``TestRealNodeEgressConformance``).
    """
    return {**_through(real_adapter_config, real_apiserver_proxy), "trust_network_policy": True}


@pytest.fixture
async def real_adapter(real_adapter_config: dict[str, Any]) -> AsyncIterator[Any]:
    """An adapter whose apps run on the real node (see :func:`real_adapter_config`)."""
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    async with KubernetesAdapter(real_adapter_config) as adapter:
        yield adapter
