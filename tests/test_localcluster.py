"""The local control plane harness's pure parts: ports, merged kubeconfigs and which binaries
each Kubernetes minor needs (no cluster)."""

from __future__ import annotations

import json
import socket
import sys
import urllib.request
from pathlib import Path

import pytest
from localcluster.binaries import (
    Binaries,
    env_bin,
    find_binaries,
    newest_minor,
    older_minors,
)
from localcluster.errors import BinariesNotFoundError
from localcluster.kubeconfig import merge_kubeconfigs, write_kubeconfig
from localcluster.net import free_ports, retry_on_taken_port, wait_until
from localcluster.process import Component


def test_no_port_is_handed_out_twice_in_one_process() -> None:
    first = free_ports(7)
    second = free_ports(7)
    assert len(set(first)) == 7
    assert not set(first) & set(second), "a second cluster never gets the first one's ports"


class _Server:
    """A real child process serving HTTP on a port, the first one given, then chosen anew."""

    def __init__(self, log_dir: Path, first_port: int) -> None:
        self.log_dir = log_dir
        self.ports = [first_port]
        self.component: Component | None = None

    def attempt(self) -> int:
        port = self.ports[-1]
        self.component = Component(
            "server",
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            self.log_dir / f"server-{len(self.ports)}.log",
            cwd=self.log_dir,
        )
        self.component.start()

        def died() -> str | None:
            code = self.component.exit_code() if self.component else None
            return None if code is None else f"exited with {code}:\n{self.component.tail()}"

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2):
                    return True
            except OSError:
                return False

        assert wait_until(answers, timeout=30, abort=died)
        return port

    def choose_again(self) -> None:
        assert self.component is not None
        self.component.stop()
        self.ports.extend(free_ports(1))

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()


def test_a_start_on_a_port_taken_meanwhile_starts_again_on_another(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        server = _Server(tmp_path, taken)
        try:
            port = retry_on_taken_port(server.attempt, reset=server.choose_again)
        finally:
            server.stop()
    assert "address already in use" in (tmp_path / "server-1.log").read_text().lower()
    assert server.ports == [taken, port], "one more try, on a port chosen anew"


def test_a_start_failing_for_another_reason_is_not_tried_again(tmp_path: Path) -> None:
    tries = []

    def attempt() -> None:
        tries.append(1)
        raise RuntimeError("the binary is missing")

    with pytest.raises(RuntimeError, match="missing"):
        retry_on_taken_port(attempt, reset=lambda: tries.append(0))
    assert tries == [1]


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


def test_the_minors_come_from_the_pinned_modules() -> None:
    newest = int(newest_minor().split(".")[1])
    assert "1.33" in older_minors()
    assert all(int(m.split(".")[1]) < newest for m in older_minors())
    assert env_bin("1.33") == "PANDO_CONTROLPLANE_BIN_1_33"


def test_an_older_minor_needs_no_node_programs(tmp_path: Path) -> None:
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        (tmp_path / name).write_text("")
        (tmp_path / name).chmod(0o755)
    older, newest = Binaries(tmp_path, node=False), Binaries(tmp_path)
    assert "kubelet" not in older.missing()
    assert "metrics-server" in older.missing()
    assert {"kubelet", "kube-proxy", "metrics-server"} <= set(newest.missing())


def test_a_minor_without_a_module_is_refused_before_any_build() -> None:
    with pytest.raises(BinariesNotFoundError, match=r"1\.29 is not buildable"):
        find_binaries(minor="1.29")
