"""Generated bad input: valid documents of each kind, mutated at random paths (a value replaced
by any JSON value, a key removed, an unknown key added), or no document at all.

Shared by the core's corpus (``tests/test_bad_input.py``) and the Kubernetes adapter's check
that nothing is written on the cluster for what is refused
(``adapters/kubernetes/tests/test_cluster_bad_input.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from setting_ranges import NUMERIC, in_range, out_of_range_values

import pando_runtime as pr
from pando_runtime._input._config import config_fields

EDGE_NUMBERS = st.sampled_from(
    [0, -1, 1, 2, 0.0, -0.0, 0.5, 1e-300, -1e-300, 10_000, 10_001, 86_400, 86_401, 2**63,
     float("nan"), float("inf"), float("-inf")]
)  # fmt: skip
"""Numbers at and just past the edges settings and plans have (0, 1, a day, 10,000 nodes)."""
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | EDGE_NUMBERS
    | st.text(max_size=30)
    | st.sampled_from(["", "-", "a" * 300, "../..", "/", "0644", "web", "sha256:x", "Ü🙂", "\x00"])
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)

VALID_BUNDLE: dict[str, Any] = {
    "bundle_id": "shop",
    "labels": {"team": "a"},
    "volumes": [{"volume_id": "data", "name": "data", "size_bytes": 1024**3}],
    "workloads": [
        {
            "name": "web",
            "image": "nginx:1.27",
            "command": ["nginx", "-g", "daemon off;"],
            "env": {"GREETING": "hello"},
            "ports": [{"number": 80}],
            "mounts": [{"volume_id": "data", "path": "/data"}],
            "files": [{"path": "/etc/app.conf", "content": "port = 80\n", "mode": 420}],
            "health": {"port": 80, "http_path": "/healthz"},
            "resources": {"cpu_millis": 500, "memory_bytes": 256 * 1024**2},
            "depends_on": ["db"],
        },
        {"name": "db", "image": "postgres:16", "ports": [{"number": 5432}]},
    ],
}
VALID_VOLUME: dict[str, Any] = {"volume_id": "data", "bundle_id": "shop", "name": "data"}
VALID_EDGE: dict[str, Any] = {
    "name": "edge",
    "image": "registry.example/edge:1",
    "args": ["--listen", ":443"],
    "env": {"MODE": "edge"},
    "ports": [{"published": 443, "target": 8443}],
}
VALID_TRIAL: dict[str, Any] = {
    "trial_id": "t1",
    "image": "registry.example/app:1",
    "command": ["serve"],
    "env": {"A": "b"},
    "declared_paths": ["/var/cache/app"],
}
VALID_EXEC: dict[str, Any] = {"command": ["sh", "-c", "true"], "env": {"A": "b"}}
VALID_FAKE_SETTINGS: dict[str, Any] = {
    "nodes": 2,
    "node_cpu_millis": 4000,
    "max_staleness": 30.0,
    "platform": "linux/amd64",
}
VALID_KUBE_SETTINGS: dict[str, Any] = {
    "api_qps": 50.0,
    "api_burst": 100,
    "max_threads": 16,
    "read_timeout": 30.0,
    "watch_timeout": 290,
    "cache_max_staleness": 30.0,
    "schedule_wait": 20.0,
    "node_selector": {"pool": "apps"},
    "app_subject": "User:alice",
    "edge_service_type": "NodePort",
}
VALID_MULTI_SETTINGS: dict[str, Any] = {
    "contexts": ["east", "west"],
    "settings": {"read_timeout": 30.0, "api_qps": 50.0, "watch_timeout": 290},
    "clusters": {"east": {"api_qps": 20.0, "api_burst": 40}, "west": {}},
}


@st.composite
def out_of_range(
    draw: Callable[..., Any], config_class: type[Any], valid: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """``valid`` with one numeric setting of ``config_class`` set out of its range.

    Returns the document and the key set; just past an edge, far past it, NaN or an infinity.
    """
    fields = [f for f in config_fields(config_class) if f.type in NUMERIC]
    field = draw(st.sampled_from(fields))
    numbers = (
        st.integers(min_value=-(2**70), max_value=2**70)
        if field.type == "integer"
        else st.floats(allow_nan=True, allow_infinity=True)
    )
    value = draw(
        st.sampled_from(out_of_range_values(field))
        | numbers.filter(lambda v: not in_range(field, v))
    )
    doc = copy.deepcopy(valid)
    doc[field.key] = value
    return doc, field.key


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``doc`` (keys and indices), the root included."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += _paths(value, (*prefix, index))
    return found


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


@st.composite
def mutated(
    draw: Callable[..., Any], valid: dict[str, Any], max_mutations: int = 3, min_mutations: int = 0
) -> Any:
    """``valid`` with ``min_mutations`` to ``max_mutations`` random changes (0: as it is)."""
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(min_mutations, max_mutations))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if not path:
            if action == "replace":
                return draw(JSON)
            continue
        parent = _at(doc, path[:-1])
        if action == "replace":
            parent[path[-1]] = draw(JSON)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(JSON)
        else:
            parent.append(draw(JSON))
    return doc


def assert_refused_well(error: pr.InvalidInput) -> None:
    """A refusal as the contract says: coded, with every problem located."""
    assert error.code in {"INVALID_INPUT", "INVALID_PLAN", "INVALID_CONFIG"}
    assert error.problems, "an InvalidInput lists its problems"
    for problem in error.problems:
        assert isinstance(problem.path, str)
        assert problem.message
    assert error.to_dict()["code"] == error.code
