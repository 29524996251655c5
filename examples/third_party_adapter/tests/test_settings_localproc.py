"""The example adapter's settings declare their ranges, and a number out of range is refused."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest

import pando_runtime as pr


def test_each_number_has_its_range() -> None:
    info = {a.name: a for a in pr.available_adapters()}["localproc"]
    fields = {f.key: f for f in info.config_fields}
    assert fields["poll_seconds"].exclusive_minimum == 0
    assert fields["stop_grace_seconds"].minimum == 0
    assert info.config_schema()["properties"]["poll_seconds"]["exclusiveMinimum"] == 0


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        ({"poll_seconds": 0}, "poll_seconds"),
        ({"poll_seconds": math.nan}, "poll_seconds"),
        ({"stop_grace_seconds": -0.5}, "stop_grace_seconds"),
        ({"stop_grace_seconds": math.inf}, "stop_grace_seconds"),
    ],
)
def test_out_of_range_is_refused_before_anything_is_made(
    settings: dict[str, float], path: str
) -> None:
    sandboxes = set(Path(tempfile.gettempdir()).glob("pando-localproc-*"))
    with pytest.raises(pr.InvalidConfig) as caught:
        pr.load_adapter("localproc", settings)
    assert [(p.path, p.code) for p in caught.value.problems] == [(path, "out_of_range")]
    assert set(Path(tempfile.gettempdir()).glob("pando-localproc-*")) == sandboxes, "no root made"
    assert "must be " in caught.value.problems[0].message
    assert path in caught.value.remedy


def test_the_edges_are_taken(tmp_path: Path) -> None:
    adapter = pr.load_adapter(
        "localproc", {"root": str(tmp_path), "poll_seconds": 1e-3, "stop_grace_seconds": 0}
    )
    assert adapter.config.stop_grace_seconds == 0
