"""The local control plane harness's pure parts: ports and merged kubeconfigs (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from localcluster.kubeconfig import merge_kubeconfigs, write_kubeconfig
from localcluster.net import free_ports


def test_no_port_is_handed_out_twice_in_one_process() -> None:
    first = free_ports(7)
    second = free_ports(7)
    assert len(set(first)) == 7
    assert not set(first) & set(second), "a second cluster never gets the first one's ports"


def _kubeconfig(tmp_path: Path, name: str) -> Path:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a real certificate")
    return write_kubeconfig(
        tmp_path / f"{name}.kubeconfig",
        server=f"https://127.0.0.1:{6443 if name == 'one' else 6444}",
        ca_cert=ca,
        user=f"{name}-admin",
        context=name,
        cluster=name,
        token="t",
    )


def test_kubeconfigs_of_named_clusters_merge_into_one(tmp_path: Path) -> None:
    sources = [_kubeconfig(tmp_path, "one"), _kubeconfig(tmp_path, "two")]
    merged = json.loads(merge_kubeconfigs(tmp_path / "both", sources).read_text())
    assert [c["name"] for c in merged["contexts"]] == ["one", "two"]
    assert [c["context"]["cluster"] for c in merged["contexts"]] == ["one", "two"]
    assert [u["name"] for u in merged["users"]] == ["one-admin", "two-admin"]
    assert merged["current-context"] == "one"
    again = merge_kubeconfigs(tmp_path / "again", sources, current="two")
    assert json.loads(again.read_text())["current-context"] == "two"


def test_kubeconfigs_with_the_same_names_do_not_merge(tmp_path: Path) -> None:
    one = _kubeconfig(tmp_path, "one")
    with pytest.raises(ValueError, match="cluster 'one' is in several kubeconfigs"):
        merge_kubeconfigs(tmp_path / "both", [one, one])
