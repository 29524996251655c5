"""Ranges of numeric settings: declared with ``setting(minimum=...)``, enforced where settings
are structured (every problem at once, each at its path, code ``out_of_range``), shown to host
UIs in ``ConfigField`` and the JSON Schema. And the fake adapter's own ranges.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from setting_ranges import assert_out_of_range, check_edges, declared_ranges

import pando_runtime as pr
from pando_runtime.testing import FakeAdapter, FakeConfig


@attrs.frozen(kw_only=True)
class Config:
    timeout: float = pr.plugin.setting(
        default=10.0, exclusive_minimum=0, maximum=60, help="Seconds per call."
    )
    retries: int = pr.plugin.setting(default=3, minimum=0, help="How often to retry.")
    port: int = pr.plugin.setting(default=8080, minimum=1, maximum=65535)
    ratio: float = pr.plugin.setting(default=0.5, minimum=0, exclusive_maximum=1)
    grace: float | None = pr.plugin.setting(default=None, minimum=0)
    name: str = pr.plugin.setting(default="x")


def _refused(data: Any) -> pr.InvalidConfig:
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.structure_config(Config, data)
    return caught.value


def test_each_range_in_words() -> None:
    cases = {
        "timeout": (-1, "must be greater than 0 and at most 60, got -1"),
        "retries": (-1, "must be at least 0, got -1"),
        "port": (0, "must be from 1 to 65535, got 0"),
        "ratio": (1.0, "must be at least 0 and less than 1, got 1.0"),
        "grace": (-0.5, "must be at least 0, got -0.5"),
    }
    for key, (value, message) in cases.items():
        error = _refused({key: value})
        assert [(p.path, p.code, p.message) for p in error.problems] == [
            (key, "out_of_range", message)
        ]
        assert_out_of_range(error, key, key)


def test_every_problem_at_once_in_the_order_of_the_settings() -> None:
    error = _refused(
        {"name": 1, "ratio": 2, "retries": "3", "timeout": 0, "extra": 1, "port": 70000}
    )
    assert [(p.path, p.code) for p in error.problems] == [
        ("timeout", "out_of_range"),
        ("retries", "wrong_type"),
        ("port", "out_of_range"),
        ("ratio", "out_of_range"),
        ("name", "wrong_type"),
        ("extra", "unknown_key"),
    ]
    assert error.code == "INVALID_CONFIG"
    assert "timeout greater than 0 and at most 60" in error.remedy
    assert "port from 1 to 65535" in error.remedy
    assert "ratio at least 0 and less than 1" in error.remedy
    assert error.to_dict()["details"]["problems"][0]["path"] == "timeout"


def test_a_wrong_type_is_one_problem_not_two() -> None:
    error = _refused({"retries": -1.5, "port": True})
    assert [(p.path, p.code) for p in error.problems] == [
        ("retries", "wrong_type"),
        ("port", "wrong_type"),
    ]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_the_infinities_are_never_in_range(value: float) -> None:
    error = _refused({"grace": value})
    assert [(p.path, p.code) for p in error.problems] == [("grace", "out_of_range")]


def test_edges_are_taken_and_values_past_them_refused() -> None:
    assert check_edges(Config, lambda s: pr.structure_config(Config, s)) == 25
    taken = pr.structure_config(
        Config, {"timeout": 60, "retries": 0, "port": 65535, "ratio": 0, "grace": None}
    )
    assert (taken.timeout, taken.port, taken.grace) == (60.0, 65535, None)
    assert isinstance(taken.timeout, float)


def test_a_config_object_is_checked_too() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.structure_config(Config, Config(timeout=-1, port=0))
    assert [p.path for p in caught.value.problems] == ["timeout", "port"]
    good = Config(timeout=1)
    assert pr.structure_config(Config, good) is good


def test_host_uis_see_the_ranges() -> None:
    info = pr.AdapterInfo(name="x", description="", factory="m:a", config_class=Config)
    fields = {f.key: f for f in info.config_fields}
    assert (fields["timeout"].exclusive_minimum, fields["timeout"].maximum) == (0, 60)
    assert (fields["timeout"].minimum, fields["timeout"].exclusive_maximum) == (None, None)
    assert (fields["port"].minimum, fields["port"].maximum) == (1, 65535)
    assert fields["name"] == pr.plugin.ConfigField(key="name", type="string", default="x")
    schema = info.config_schema()["properties"]
    assert schema["timeout"] == {
        "type": "number",
        "description": "Seconds per call.",
        "default": 10.0,
        "exclusiveMinimum": 0,
        "maximum": 60,
    }
    assert schema["ratio"]["minimum"] == 0
    assert schema["ratio"]["exclusiveMaximum"] == 1
    assert schema["grace"]["anyOf"][1] == {"type": "null"}
    assert schema["grace"]["minimum"] == 0


@pytest.mark.parametrize(
    ("bounds", "fault"),
    [
        ({"minimum": 0, "exclusive_minimum": 0}, "minimum or exclusive_minimum"),
        ({"maximum": 1, "exclusive_maximum": 1}, "maximum or exclusive_maximum"),
        ({"minimum": 2, "maximum": 1}, "holds no number"),
        ({"exclusive_minimum": 1, "maximum": 1}, "holds no number"),
        ({"minimum": 10}, "default 5 is not at least 10"),
    ],
)
def test_contradictory_ranges_are_refused_where_declared(
    bounds: dict[str, float], fault: str
) -> None:
    with pytest.raises(ValueError, match=fault):
        pr.plugin.setting(default=5, **bounds)


def test_a_single_value_range_is_fine() -> None:
    @attrs.frozen
    class Pinned:
        version: int = pr.plugin.setting(default=1, minimum=1, maximum=1)

    assert pr.structure_config(Pinned, {"version": 1}).version == 1
    with pytest.raises(pr.InvalidConfig, match="must be from 1 to 1, got 2"):
        pr.structure_config(Pinned, {"version": 2})


@attrs.frozen
class Endpoint:
    host: str = pr.plugin.setting(default="a")
    retries: int = pr.plugin.setting(default=1, minimum=0)

    def __attrs_post_init__(self) -> None:
        if not self.host:
            raise pr.InvalidConfig("bad endpoint", [pr.Problem("host", "empty", "required")])


@attrs.frozen
class Outer:
    endpoint: Endpoint


def test_a_class_s_own_checks_are_problems_at_their_paths() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.structure_config(Endpoint, {"host": "", "retries": -1})
    assert [(p.path, p.code) for p in caught.value.problems] == [
        ("host", "required"),
        ("retries", "out_of_range"),
    ]
    with pytest.raises(pr.InvalidPlan) as nested:
        pr.structure({"endpoint": {"host": ""}}, Outer)
    assert [(p.path, p.code) for p in nested.value.problems] == [("endpoint.host", "required")]


# -- the fake adapter's ranges -----------------------------------------------------------------


def test_the_fake_declares_a_range_for_every_number() -> None:
    assert declared_ranges(FakeConfig) == {
        "nodes": (0, None, 10_000, None),
        "node_cpu_millis": (0, None, None, None),
        "node_memory_bytes": (0, None, None, None),
        "max_staleness": (None, 0, None, None),
    }


def test_the_fake_refuses_settings_out_of_range() -> None:
    assert check_edges(FakeConfig, lambda s: pr.load_adapter("fake", s)) > 0
    with pytest.raises(pr.InvalidConfig) as caught:
        FakeAdapter({"nodes": -1, "max_staleness": 0, "platform": 1})
    assert [(p.path, p.code) for p in caught.value.problems] == [
        ("nodes", "out_of_range"),
        ("platform", "wrong_type"),
        ("max_staleness", "out_of_range"),
    ]
    assert len(FakeAdapter({"nodes": 0}).nodes) == 0
    assert len(FakeAdapter({"nodes": 10_000}).nodes) == 10_000
