"""The ranges of the Kubernetes adapters' numeric settings, refused when the adapter is made.

Both adapters: the single-cluster one (a problem at the setting's key) and the multi-cluster
one (at ``settings.<key>`` or ``clusters['<name>'].<key>``, where it was given). No I/O: an
adapter reads its kubeconfig on first use, after its settings were taken.
"""

from __future__ import annotations

from typing import Any

import pytest
from pando_runtime_kubernetes._info import KubernetesConfig
from pando_runtime_kubernetes.cache._list_watch import jittered
from setting_ranges import assert_out_of_range, check_edges, declared_ranges

import pando_runtime as pr

DAY = 86_400

RANGES = {
    "api_qps": (None, 0, None, None),
    "api_burst": (1, None, None, None),
    "max_threads": (1, None, None, None),
    "max_streams": (1, None, None, None),
    "connect_timeout": (None, 0, DAY, None),
    "read_timeout": (None, 0, DAY, None),
    "watch_timeout": (1, None, DAY, None),
    "rate_limit_wait": (0, None, None, None),
    "cache_max_staleness": (None, 0, None, None),
    "cache_probe_interval": (None, 0, None, None),
    "canary_wait": (None, 0, None, None),
    "schedule_wait": (0, None, None, None),
    "dependency_wait": (0, None, None, None),
    "stop_wait": (0, None, None, None),
    "volume_size_bytes": (1, None, None, None),
    "volume_bind_wait": (0, None, None, None),
    "helper_wait": (None, 0, None, None),
}
"""(minimum, exclusive_minimum, maximum, exclusive_maximum) of every numeric setting."""


def _kube(settings: dict[str, Any]) -> Any:
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    return KubernetesAdapter(settings)


def _multi(settings: dict[str, Any]) -> Any:
    from pando_runtime_kubernetes._multi import MultiClusterAdapter  # noqa: PLC0415

    return MultiClusterAdapter(settings)


def test_every_numeric_setting_has_its_range() -> None:
    assert declared_ranges(KubernetesConfig) == RANGES


def test_the_adapter_takes_each_edge_and_refuses_past_it() -> None:
    assert check_edges(KubernetesConfig, _kube) > 2 * len(RANGES)
    assert check_edges(KubernetesConfig, lambda s: pr.load_adapter("kubernetes", s)) > 0


def test_the_brief_s_examples_are_refused_at_once() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        _kube({"read_timeout": -1, "api_qps": 0, "max_threads": 0, "api_burst": "many"})
    error = caught.value
    assert [(p.path, p.code) for p in error.problems] == [
        ("api_qps", "out_of_range"),
        ("api_burst", "wrong_type"),
        ("max_threads", "out_of_range"),
        ("read_timeout", "out_of_range"),
    ]
    for key in ("api_qps", "max_threads", "read_timeout"):
        assert_out_of_range(error, key, key)
    assert "read_timeout greater than 0 and at most 86400" in error.remedy
    assert "must be at least 1, got 0" in str(error)


def test_a_config_object_out_of_range_is_refused() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        _kube(KubernetesConfig(watch_timeout=0))  # type: ignore[arg-type]
    assert [(p.path, p.code) for p in caught.value.problems] == [("watch_timeout", "out_of_range")]


def test_host_uis_see_the_ranges() -> None:
    info = {a.name: a for a in pr.available_adapters()}["kubernetes"]
    schema = info.config_schema()["properties"]
    assert schema["read_timeout"]["exclusiveMinimum"] == 0
    assert schema["read_timeout"]["maximum"] == DAY
    assert schema["api_burst"]["minimum"] == 1
    assert "minimum" not in schema["kubeconfig"]


# -- the multi-cluster adapter --------------------------------------------------------------------


def test_multi_cluster_settings_are_refused_where_they_were_given() -> None:
    check_edges(
        KubernetesConfig,
        lambda s: _multi({"settings": s}),
        path=lambda key: f"settings.{key}",
    )
    with pytest.raises(pr.InvalidConfig) as caught:
        _multi(
            {
                "settings": {"read_timeout": -1, "api_qps": 5},
                "clusters": {"north": {"api_burst": 0}, "south": {"api_qps": 0}},
            }
        )
    error = caught.value
    assert [(p.path, p.code) for p in error.problems] == [
        ("settings.read_timeout", "out_of_range"),
        ("clusters['north'].api_burst", "out_of_range"),
        ("clusters['south'].api_qps", "out_of_range"),
    ]
    assert_out_of_range(error, "clusters['north'].api_burst", "api_burst")
    assert_out_of_range(error, "settings.read_timeout", "read_timeout")


def test_multi_cluster_edges_per_cluster() -> None:
    check_edges(
        KubernetesConfig,
        lambda s: _multi({"contexts": ["east"], "clusters": {"east": s}}),
        path=lambda key: f"clusters['east'].{key}",
    )


def test_a_watch_timeout_of_one_second_stays_one_second() -> None:
    assert [jittered(1, d) for d in (0.0, 0.49, 0.999)] == [1, 1, 1]
    assert [jittered(290, d) for d in (0.0, 0.5, 0.999)] == [261, 290, 318]
