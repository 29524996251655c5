"""The multi-cluster adapter's pure parts: common capabilities, settings, registration."""

from __future__ import annotations

from pathlib import Path

import pytest
from _kubeconfigs import kubeconfig_file
from pando_runtime_kubernetes._info import MULTI_ADAPTER, MultiClusterConfig

from pando_runtime import (
    AdapterUnavailable,
    ImageDelivery,
    InvalidConfig,
    IsolationClass,
    RuntimeCapabilities,
    available_adapters,
)


def test_common_capabilities_are_what_every_member_has() -> None:
    from pando_runtime_kubernetes._members import common_capabilities  # noqa: PLC0415

    roomy = RuntimeCapabilities(
        isolation_class=IsolationClass.SANDBOXED,
        exec=True,
        reports_usage=True,
        private_network=True,
        image_delivery=(ImageDelivery.REGISTRY, ImageDelivery.IMPORT),
    )
    plain = RuntimeCapabilities(
        isolation_class=IsolationClass.CONTAINER,
        exec=True,
        reports_usage=False,
        private_network=True,
        image_delivery=(ImageDelivery.REGISTRY,),
    )
    common = common_capabilities([roomy, plain])
    assert common.exec
    assert common.private_network
    assert not common.reports_usage, "one member without the metrics API: not reported"
    assert common.isolation_class is IsolationClass.CONTAINER, "the weakest isolation"
    assert common.image_delivery == (ImageDelivery.REGISTRY,)
    assert common_capabilities([roomy]) == roomy


def test_the_multi_cluster_adapter_is_listed_by_its_entry_point() -> None:
    listed = {a.name: a for a in available_adapters()}
    assert "kubernetes-multi" in listed
    assert listed["kubernetes-multi"].config_class is MultiClusterConfig
    assert MULTI_ADAPTER.factory.endswith(":MultiClusterAdapter")


def test_member_settings_are_checked_before_any_io() -> None:
    from pando_runtime_kubernetes._multi import MultiClusterAdapter  # noqa: PLC0415

    with pytest.raises(InvalidConfig) as caught:
        MultiClusterAdapter({"contexts": ["a"], "clusters": {"a": {"api_qps": "fast"}}})
    assert [p.path for p in caught.value.problems] == ["clusters['a'].api_qps"]
    with pytest.raises(InvalidConfig) as caught:
        MultiClusterAdapter({"settings": {"context": "a"}})
    assert [(p.path, p.code) for p in caught.value.problems] == [("settings.context", "conflict")]
    with pytest.raises(InvalidConfig) as caught:
        MultiClusterAdapter({"contexts": ["a"], "clusters": {"a": {"pod_cidr": "10.0.0.0/99"}}})
    assert [(p.path, p.code) for p in caught.value.problems] == [
        ("clusters['a'].pod_cidr", "invalid_cidr")
    ]
    with pytest.raises(InvalidConfig) as caught:  # contexts unset: settings are checked anyway
        MultiClusterAdapter({"settings": {"dns_namespace": "Not A Name", "api_qps": -1}})
    assert [(p.path, p.code) for p in caught.value.problems] == [
        ("settings.api_qps", "out_of_range")
    ]
    with pytest.raises(InvalidConfig) as caught:
        MultiClusterAdapter({"clusters": {"b": {"dns_namespace": "Not A Name"}}})
    assert [p.path for p in caught.value.problems] == ["clusters['b'].dns_namespace"]


@pytest.mark.anyio
async def test_every_context_is_a_member_and_the_current_one_is_the_default(
    tmp_path: Path,
) -> None:
    from pando_runtime_kubernetes._multi import MultiClusterAdapter  # noqa: PLC0415

    config = kubeconfig_file(tmp_path / "kubeconfig", "east", "west", "north", current="west")
    adapter = MultiClusterAdapter({"kubeconfig": str(config), "clusters": {"east": {"api_qps": 7}}})
    with pytest.raises(AdapterUnavailable) as caught:
        await adapter.capacity()  # nothing listens on those ports
    assert caught.value.details.get("cluster") == "west", "the default is asked first"
    assert list(adapter.members) == ["west", "east", "north"]
    assert adapter.default_cluster == "west"
    assert adapter.members["east"].config.api_qps == 7
    assert adapter.members["north"].config.api_qps == MultiClusterConfig().settings.get(
        "api_qps", 50.0
    )
    details = adapter.health_details()
    assert details["east.egress_restriction"] == "not verified"
    assert {k.split(".")[0] for k in details} == {"west", "east", "north"}
    chosen = MultiClusterAdapter(
        {"kubeconfig": str(config), "contexts": ["east", "north"], "default_cluster": "north"}
    )
    with pytest.raises(AdapterUnavailable):
        await chosen.observe_edge("x")
    assert list(chosen.members) == ["north", "east"]


@pytest.mark.anyio
async def test_a_context_that_does_not_exist_is_named(tmp_path: Path) -> None:
    from pando_runtime_kubernetes._multi import MultiClusterAdapter  # noqa: PLC0415

    config = kubeconfig_file(tmp_path / "kubeconfig", "east", current="east")
    adapter = MultiClusterAdapter({"kubeconfig": str(config), "contexts": ["east", "south"]})
    with pytest.raises(AdapterUnavailable, match="south"):
        await adapter.capabilities()


def test_upstream_is_computed_before_any_cluster_is_read() -> None:
    from pando_runtime_kubernetes._multi import MultiClusterAdapter  # noqa: PLC0415

    from pando_runtime import WorkloadRef  # noqa: PLC0415

    adapter = MultiClusterAdapter({"settings": {"cluster_domain": "fleet.local"}})
    upstream = adapter.upstream(WorkloadRef("shop", "web"), 8080)
    assert upstream.url == "http://web.pando-shop.svc.fleet.local:8080"
    assert adapter.members == {}, "no I/O: nothing was loaded"


def _inline_kubeconfig(user: dict[str, object]) -> bytes:
    import yaml  # noqa: PLC0415

    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).encode()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (_inline_kubeconfig({"exec": {"command": "/bin/true"}}), "uses 'exec'"),
        (_inline_kubeconfig({"tokenFile": "/var/run/token"}), "uses 'tokenFile'"),
        (_inline_kubeconfig({"client-certificate": "/etc/cert.pem"}), "uses 'client-certificate'"),
        (b"{not: [yaml", "not YAML"),
        (b"- a list", "not a mapping"),
        (b"contexts: []", "no current-context"),
    ],
)
def test_a_remote_secrets_kubeconfig_is_inline_or_refused_naming_where(
    data: bytes, why: str
) -> None:
    from pando_runtime_kubernetes._remote_secrets import cluster_from_kubeconfig  # noqa: PLC0415

    where = "Secret istio-system/fleet, key 'east'"
    with pytest.raises(ValueError, match=why) as caught:
        cluster_from_kubeconfig("east", data, where)
    assert str(caught.value).startswith(where)


def test_a_remote_secrets_inline_token_loads_and_never_shows() -> None:
    from pando_runtime_kubernetes._remote_secrets import cluster_from_kubeconfig  # noqa: PLC0415

    token = "s3cr3t-token-value"  # noqa: S105 - a test's own
    cluster = cluster_from_kubeconfig("east", _inline_kubeconfig({"token": token}), "Secret a/b")
    assert cluster.name == "east"
    assert cluster.configuration.host == "https://127.0.0.1:6443"
    assert token not in repr(cluster)
