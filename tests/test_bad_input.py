"""Bad input, generated: bundle files (JSON and YAML), adapter settings, the command line's
arguments, and volume, edge, trial and exec requests.

Every example is either valid or refused with a coded ``InvalidInput`` whose problems each
carry a path; nothing is written for a refused one; no other exception escapes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import anyio
import pytest
import yaml
from bad_input import (
    JSON,
    VALID_BUNDLE,
    VALID_EDGE,
    VALID_EXEC,
    VALID_FAKE_SETTINGS,
    VALID_KUBE_SETTINGS,
    VALID_MULTI_SETTINGS,
    VALID_TRIAL,
    VALID_VOLUME,
    assert_refused_well,
    mutated,
    out_of_range,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from setting_ranges import assert_within_ranges

import pando_runtime as pr
from pando_runtime._cli import main as cli_main
from pando_runtime.testing import FakeAdapter, FakeConfig

CORPUS = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,  # the same corpus on every run: a failure is reproducible in CI
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SMALLER = settings(CORPUS, max_examples=200)

WORK = Path(tempfile.mkdtemp(prefix="pando-bad-input-"))


def _serialize(doc: Any, form: str) -> bytes:
    if form == "json":
        return json.dumps(doc).encode()
    return yaml.safe_dump(doc, allow_unicode=True).encode()


@CORPUS
@given(
    doc=mutated(VALID_BUNDLE) | JSON,
    form=st.sampled_from(["json", "yaml"]),
    raw=st.none() | st.binary(max_size=200),
)
def test_bundle_files(doc: Any, form: str, raw: bytes | None) -> None:
    path = WORK / f"bundle.{form}"
    path.write_bytes(raw if raw is not None else _serialize(doc, form))
    try:
        plan = pr.load_bundle_file(path)
        pr.check_plan(plan)
    except pr.InvalidInput as error:
        assert_refused_well(error)
        return
    assert isinstance(plan, pr.BundlePlan)


@SMALLER
@given(doc=mutated(VALID_FAKE_SETTINGS) | JSON)
def test_fake_settings(doc: Any) -> None:
    try:
        adapter = pr.load_adapter("fake", doc)
    except pr.InvalidInput as error:
        assert_refused_well(error)
        return
    assert adapter.kind == "fake"
    assert_within_ranges(adapter.config)


@SMALLER
@given(doc=mutated(VALID_KUBE_SETTINGS) | JSON)
def test_kubernetes_settings(doc: Any) -> None:
    try:
        adapter = pr.load_adapter("kubernetes", doc)  # no I/O until it is used
    except pr.InvalidInput as error:
        assert_refused_well(error)
        return
    assert adapter.kind == "kubernetes"
    assert_within_ranges(adapter.config)


@SMALLER
@given(doc=mutated(VALID_MULTI_SETTINGS, max_mutations=4) | JSON)
def test_multi_cluster_settings(doc: Any) -> None:
    try:
        adapter = pr.load_adapter("kubernetes-multi", doc)  # no I/O until it is used
    except pr.InvalidInput as error:
        assert_refused_well(error)
        return
    assert adapter.kind == "kubernetes-multi"
    for name in adapter.config.contexts or ():
        assert_within_ranges(adapter._member_config(name))


def _kube_config() -> type[Any]:
    from pando_runtime_kubernetes._info import KubernetesConfig  # noqa: PLC0415

    return KubernetesConfig


@SMALLER
@given(
    fake=out_of_range(FakeConfig, VALID_FAKE_SETTINGS),
    kube=out_of_range(_kube_config(), VALID_KUBE_SETTINGS),
    member=out_of_range(_kube_config(), VALID_MULTI_SETTINGS["clusters"]["east"]),
    shared=out_of_range(_kube_config(), VALID_MULTI_SETTINGS["settings"]),
)
def test_numbers_out_of_range_are_refused_at_their_paths(
    fake: tuple[dict[str, Any], str],
    kube: tuple[dict[str, Any], str],
    member: tuple[dict[str, Any], str],
    shared: tuple[dict[str, Any], str],
) -> None:
    multi = {**VALID_MULTI_SETTINGS, "settings": shared[0]}
    multi["clusters"] = {**multi["clusters"], "east": member[0]}
    cases = [
        ("fake", fake[0], fake[1]),
        ("kubernetes", kube[0], kube[1]),
        ("kubernetes-multi", multi, f"settings.{shared[1]}"),
        ("kubernetes-multi", multi, f"clusters['east'].{member[1]}"),
    ]
    for kind, doc, path in cases:
        with pytest.raises(pr.InvalidConfig) as caught:
            pr.load_adapter(kind, doc)
        assert_refused_well(caught.value)
        assert (path, "out_of_range") in [(p.path, p.code) for p in caught.value.problems]


def _refused_or_done(call: Any) -> pr.InvalidInput | None:
    """Run ``call``: ``None`` when it worked, the refusal when refused."""
    try:
        anyio.run(call)
    except pr.InvalidInput as error:
        assert_refused_well(error)
        return error
    except pr.CapabilityUnsupported:
        return None  # a good request this runtime cannot run: coded, named
    return None


async def _fake_with_app() -> FakeAdapter:
    fake = FakeAdapter()
    await fake.apply(pr.structure(VALID_BUNDLE, pr.BundlePlan))
    return fake


KINDS: dict[str, tuple[dict[str, Any], type[Any]]] = {
    "volume": (VALID_VOLUME, pr.VolumeRequest),
    "edge": (VALID_EDGE, pr.EdgePlan),
    "trial": (VALID_TRIAL, pr.TrialRequest),
    "exec": (VALID_EXEC, pr.ExecRequest),
}


@SMALLER
@given(data=st.data(), kind=st.sampled_from(sorted(KINDS)))
def test_requests(data: st.DataObject, kind: str) -> None:
    valid, cls = KINDS[kind]
    doc = data.draw(mutated(valid) | JSON)
    try:
        request = pr.structure(doc, cls)
    except pr.InvalidInput as error:
        assert_refused_well(error)
        return
    fake = anyio.run(_fake_with_app)
    writes = fake.writes
    ref = pr.WorkloadRef("shop", "web")
    calls = {
        "volume": lambda: fake.create_volume(request),
        "edge": lambda: fake.apply_edge(request),
        "trial": lambda: fake.trial(request),
        "exec": lambda: fake.run(ref, request),
    }
    if _refused_or_done(calls[kind]) is not None:
        assert fake.writes == writes, "nothing is written for a refused request"


COMMANDS = ["adapters", "check", "validate", "apply", "observe", "stop", "destroy", "volume",
            "capacity", "usage", "exec"]  # fmt: skip
TOKENS = st.sampled_from(
    [*COMMANDS, "--output", "json", "table", "--set", "nodes=2", "nodes=-1", "nodes=x", "x=1",
     "--adapter", "fake", "nope", "--config", "shop", "web", "--", "--wait", "--volumes",
     "snapshot", "restore", "--timeout", "-1", "1e400", "bundle.yaml", "bad.json", ""]
)  # fmt: skip


def _world(state: Path) -> Any:
    """What the fake's state file holds, less its format version (absent: the empty world)."""
    if not state.exists():
        return {}
    world = json.loads(state.read_text())
    world.pop("version", None)
    return {k: v for k, v in world.items() if v}


@SMALLER
@given(argv=st.lists(TOKENS | st.text(max_size=8), max_size=7))
def test_command_line(argv: list[str]) -> None:
    state = WORK / "fake-state.json"
    (WORK / "bundle.yaml").write_text(yaml.safe_dump(VALID_BUNDLE))
    (WORK / "bad.json").write_text('{"bundle_id": 1, "workloads": "no"}')
    before = _world(state)
    out, err = io.StringIO(), io.StringIO()
    env = {"PANDO_RUNTIME_ADAPTER": "fake", "PANDO_RUNTIME_CONFIG": str(WORK / "fake.json")}
    (WORK / "fake.json").write_text(json.dumps({"state_file": str(state)}))
    with (
        mock.patch.dict(os.environ, env),
        mock.patch("sys.stdin", io.TextIOWrapper(io.BytesIO(b""))),
        contextlib.chdir(WORK),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = cli_main(["--output", "json", *argv])
        except SystemExit as stop:  # argparse: usage errors (2) and --help (0)
            code = stop.code if isinstance(stop.code, int) else 2
    assert code in range(6), (argv, code, err.getvalue())
    if code == 2 and out.getvalue().strip():
        answer = json.loads(out.getvalue().strip().splitlines()[-1])
        assert answer["error"]["code"].startswith("INVALID")
    if code not in (0, 1):
        assert _world(state) == before, f"a refused command changed the world: {argv}"


@pytest.fixture(autouse=True, scope="module")
def _work_dir() -> Iterator[None]:
    yield
    shutil.rmtree(WORK, ignore_errors=True)
