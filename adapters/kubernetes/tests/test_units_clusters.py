"""Cluster sets without a server: kubeconfig files merged as kubectl merges them, in-cluster.

Everything here reads real files written to ``tmp_path`` and runs real exec plugins.
"""

# ruff: noqa: S105, S106
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from pando_runtime_kubernetes import IN_CLUSTER, ApiRate, Cluster, ClusterSet

from pando_runtime import AdapterUnavailable, InvalidInput, NotFound

SECRET = "s3cr3t-token-value"


def _cluster(name: str, server: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cluster": {"server": server, **extra}}


def _user(name: str, **credentials: Any) -> dict[str, Any]:
    return {"name": name, "user": credentials}


def _context(name: str, cluster: str, user: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "context": {"cluster": cluster, "user": user, **extra}}


def _write(path: Path, *, current: str | None = None, **sections: list[Any]) -> Path:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", **sections}
    if current is not None:
        doc["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _simple(path: Path, *names: str, current: str | None = None, port: int = 6443) -> Path:
    return _write(
        path,
        current=current,
        clusters=[_cluster(n, f"https://127.0.0.1:{port + i}") for i, n in enumerate(names)],
        users=[_user(n, token=f"{SECRET}-{n}") for n in names],
        contexts=[_context(n, n, n) for n in names],
    )


def _token(cluster: Cluster) -> str:
    return str(cluster.configuration.api_key.get("BearerToken", ""))


def test_kubeconfig_list_merges_first_file_wins(tmp_path: Path) -> None:
    first = _write(
        tmp_path / "one" / "config",
        clusters=[_cluster("shared", "https://10.0.0.1:443")],
        contexts=[_context("a", "shared", "u-second"), _context("b", "shared", "u-first")],
        users=[_user("u-first", token="first")],
    )
    second = _write(
        tmp_path / "two" / "config",
        current="b",
        clusters=[
            _cluster("shared", "https://10.0.0.2:443"),
            _cluster("own", "https://10.0.0.3:443", **{"certificate-authority": "ca.crt"}),
        ],
        contexts=[_context("a", "own", "u-first"), _context("c", "own", "u-second")],
        users=[_user("u-first", token="second"), _user("u-second", token="from-two")],
    )
    (tmp_path / "two" / "ca.crt").write_text("not read until a client is made\n")
    missing = tmp_path / "absent" / "config"
    env = {"KUBECONFIG": os.pathsep.join([str(first), "", str(missing), str(second)])}
    clusters = ClusterSet.load(environ=env, in_cluster=False)

    assert clusters.files == (str(first), str(second)), "a missing $KUBECONFIG file is skipped"
    assert set(clusters.names()) == {"a", "b", "c"}
    assert clusters.problems == ()
    # Context "a" comes from the first file; its user from the second file, the only one with it.
    a = clusters.cluster("a")
    assert a.configuration.host == "https://10.0.0.1:443"
    assert _token(a) == "Bearer from-two"
    assert a.source == str(first)
    # The second file's "u-first" loses to the first file's.
    assert _token(clusters.cluster("b")) == "Bearer first"
    # A relative certificate path resolves against the file that named it.
    c = clusters.cluster("c")
    assert c.configuration.ssl_ca_cert == str(tmp_path / "two" / "ca.crt")
    # current-context: the first file sets none, the second does.
    assert clusters.default_name == "b"
    assert clusters.default is clusters.cluster("b")
    assert clusters.names()[0] == "b"


def test_current_context_comes_from_the_first_file_that_sets_one(tmp_path: Path) -> None:
    first = _simple(tmp_path / "1", "x", "y", current="y")
    second = _simple(tmp_path / "2", "z", current="z")
    env = {"KUBECONFIG": os.pathsep.join([str(first), str(second)])}
    clusters = ClusterSet.load(environ=env, in_cluster=False)
    assert clusters.default_name == "y"
    assert [c.name for c in clusters] == ["y", "x", "z"]


def test_home_kubeconfig_gives_every_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _simple(tmp_path / ".kube" / "config", "one", "two", "three", current="two")
    clusters = ClusterSet.load(environ={})
    assert sorted(clusters.names()) == ["one", "three", "two"]
    assert clusters.default.name == "two"
    assert clusters.files == (str(tmp_path / ".kube" / "config"),)
    assert clusters.cluster("three").configuration.host == "https://127.0.0.1:6445"


def test_set_kubeconfig_variable_never_falls_back_to_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _simple(tmp_path / ".kube" / "config", "home", current="home")
    clusters = ClusterSet.load(environ={"KUBECONFIG": str(tmp_path / "nothing")})
    assert len(clusters) == 0
    with pytest.raises(AdapterUnavailable, match="no kubeconfig found"):
        _ = clusters.default


def test_a_broken_context_is_reported_and_the_others_load(tmp_path: Path) -> None:
    good = _write(
        tmp_path / "good",
        current="no-cluster",
        clusters=[
            _cluster("ok", "https://10.0.0.1:443"),
            _cluster("bad-ca", "https://10.0.0.2:443", **{"certificate-authority": "gone.crt"}),
            {"name": "serverless", "cluster": {}},
        ],
        users=[_user("u", token=SECRET)],
        contexts=[
            _context("fine", "ok", "u"),
            _context("no-cluster", "missing", "u"),
            _context("missing-ca", "bad-ca", "u"),
            _context("no-server", "serverless", "u"),
        ],
    )
    broken = tmp_path / "broken"
    broken.write_text("clusters: [unclosed\n")
    other = _simple(tmp_path / "other", "elsewhere")
    env = {"KUBECONFIG": os.pathsep.join(map(str, (good, broken, other)))}
    clusters = ClusterSet.load(environ=env, in_cluster=False)

    assert sorted(clusters.names()) == ["elsewhere", "fine"]
    by_context = {p.context: p for p in clusters.problems}
    assert set(by_context) == {None, "no-cluster", "missing-ca", "no-server"}
    assert by_context[None].source == str(broken)
    assert "cannot read" in by_context[None].reason
    assert by_context["no-cluster"].source == str(good)
    assert "missing" in by_context["no-cluster"].reason
    assert "gone.crt" in by_context["missing-ca"].reason
    assert "no server" in by_context["no-server"].reason
    for problem in clusters.problems:
        assert SECRET not in str(problem)
    # The current context is broken: no default, and saying so names the file and why.
    assert clusters.default_name is None
    with pytest.raises(AdapterUnavailable, match="no-cluster") as raised:
        _ = clusters.default
    assert str(good) in raised.value.message
    with pytest.raises(AdapterUnavailable, match=r"gone\.crt"):
        clusters.cluster("missing-ca")
    # An unknown name may have been in the unreadable file: that file is named.
    with pytest.raises(AdapterUnavailable, match="cannot read"):
        clusters.cluster("never-heard-of")


def _service_account_dir(root: Path) -> Path:
    root.mkdir()
    (root / "token").write_text(SECRET)
    (root / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (root / "namespace").write_text("tenant-a\n")
    return root


IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_cluster_from_the_service_account_dir(tmp_path: Path) -> None:
    sa_dir = _service_account_dir(tmp_path / "sa")
    env = {**IN_POD, "KUBECONFIG": str(tmp_path / "none")}
    clusters = ClusterSet.load(environ=env, service_account_dir=sa_dir)
    assert clusters.names() == (IN_CLUSTER,)
    cluster = clusters.default
    assert cluster.name == IN_CLUSTER
    assert cluster.configuration.host == "https://10.96.0.1:443"
    assert cluster.configuration.ssl_ca_cert == str(sa_dir / "ca.crt")
    assert _token(cluster).lower() == f"bearer {SECRET}"
    assert cluster.namespace == "tenant-a"
    assert SECRET not in repr(cluster)
    # One call: Cluster.load gives the same.
    assert Cluster.load(environ=env, service_account_dir=sa_dir).name == IN_CLUSTER


def test_in_cluster_is_default_only_without_a_current_context(tmp_path: Path) -> None:
    sa_dir = _service_account_dir(tmp_path / "sa")
    no_current = _simple(tmp_path / "a", "ctx")
    with_current = _simple(tmp_path / "b", "ctx", current="ctx")
    clusters = ClusterSet.load(
        environ={**IN_POD, "KUBECONFIG": str(no_current)}, service_account_dir=sa_dir
    )
    assert clusters.default_name == IN_CLUSTER
    assert set(clusters.names()) == {IN_CLUSTER, "ctx"}
    clusters = ClusterSet.load(
        environ={**IN_POD, "KUBECONFIG": str(with_current)}, service_account_dir=sa_dir
    )
    assert clusters.default_name == "ctx"
    # Not in a pod: no in-cluster member, and no current context means no default.
    clusters = ClusterSet.load(environ={"KUBECONFIG": str(no_current)})
    assert clusters.names() == ("ctx",)
    assert clusters.default_name is None
    with pytest.raises(AdapterUnavailable, match="no current context"):
        _ = clusters.default


def test_in_cluster_without_a_token_is_a_problem(tmp_path: Path) -> None:
    sa_dir = _service_account_dir(tmp_path / "sa")
    (sa_dir / "token").unlink()
    ok = _simple(tmp_path / "cfg", "ctx")
    clusters = ClusterSet.load(
        environ={**IN_POD, "KUBECONFIG": str(ok)}, service_account_dir=sa_dir
    )
    assert clusters.names() == ("ctx",)
    (problem,) = clusters.problems
    assert (problem.source, problem.context) == (str(sa_dir), IN_CLUSTER)
    assert "token" in problem.reason.lower()


def test_an_explicit_kubeconfig_stands_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _simple(tmp_path / ".kube" / "config", "home", current="home")
    listed = _simple(tmp_path / "listed", "listed", current="listed")
    explicit = _simple(tmp_path / "explicit", "mine", current="mine")
    sa_dir = _service_account_dir(tmp_path / "sa")
    env = {**IN_POD, "KUBECONFIG": str(listed)}
    clusters = ClusterSet.load(explicit, environ=env, service_account_dir=sa_dir)
    assert clusters.names() == ("mine",), "no $KUBECONFIG, no home file, no in-cluster"
    clusters = ClusterSet.load(tmp_path / "typo", environ=env, service_account_dir=sa_dir)
    (problem,) = clusters.problems
    assert problem.source == str(tmp_path / "typo")
    assert problem.reason == "file does not exist"
    with pytest.raises(AdapterUnavailable, match="file does not exist"):
        Cluster.load(tmp_path / "typo", environ=env)


def _plugin(tmp_path: Path, name: str, body: str) -> Path:
    script = tmp_path / name
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _exec_user(name: str, command: Path, *args: str) -> dict[str, Any]:
    return _user(
        name,
        exec={
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(command),
            "args": list(args),
            "interactiveMode": "Never",
        },
    )


PLUGIN = """
import json, pathlib, sys
pathlib.Path(sys.argv[1]).write_text("ran")
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": "from-plugin", "expirationTimestamp": "2099-01-01T00:00:00Z"},
}))
"""


def test_exec_plugins_and_token_files_load_through_the_client(tmp_path: Path) -> None:
    good = _plugin(tmp_path, "good-plugin", PLUGIN)
    failing = _plugin(tmp_path, "failing-plugin", "import sys\nsys.exit(3)\n")
    (tmp_path / "sa-token").write_text("from-file")
    config = _write(
        tmp_path / "config",
        current="plugin",
        clusters=[_cluster("c", "https://10.0.0.1:443")],
        users=[
            _exec_user("plugin", good, str(tmp_path / "ran-plugin")),
            _exec_user("failing", failing),
            _user("file", tokenFile="sa-token"),
        ],
        contexts=[
            _context("plugin", "c", "plugin"),
            _context("failing", "c", "failing"),
            _context("file", "c", "file"),
        ],
    )
    clusters = ClusterSet.load(config)
    assert _token(clusters.cluster("plugin")) == "Bearer from-plugin"
    assert _token(clusters.cluster("file")) == "Bearer from-file"
    (problem,) = clusters.problems
    assert (problem.context, problem.source) == ("failing", str(config))
    assert "exec plugin" in problem.reason


def test_loading_one_cluster_runs_only_its_own_plugin(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, "plugin", PLUGIN)
    config = _write(
        tmp_path / "config",
        current="plain",
        clusters=[_cluster("c", "https://10.0.0.1:443")],
        users=[_user("plain", token=SECRET), _exec_user("other", plugin, str(tmp_path / "ran"))],
        contexts=[_context("plain", "c", "plain"), _context("other", "c", "other")],
    )
    cluster = Cluster.load(config, rate=ApiRate(qps=5, burst=7))
    assert cluster.name == "plain"
    assert cluster.rate == ApiRate(qps=5, burst=7)
    assert not (tmp_path / "ran").exists(), "another context's plugin must not run"
    assert Cluster.load(config, "other").name == "other"
    assert (tmp_path / "ran").read_text() == "ran"
    with pytest.raises(AdapterUnavailable, match="no such context"):
        Cluster.load(config, "nope")


def test_rates_per_cluster(tmp_path: Path) -> None:
    config = _simple(tmp_path / "config", "slow", "fast", current="fast")
    clusters = ClusterSet.load(
        config, rates={"slow": ApiRate(qps=1, burst=2)}, default_rate=ApiRate(qps=80, burst=160)
    )
    assert clusters.cluster("slow").rate == ApiRate(qps=1, burst=2)
    assert clusters.cluster("fast").rate == ApiRate(qps=80, burst=160)
    assert clusters.cluster("fast").with_rate(ApiRate(qps=3)).rate.qps == 3
    with pytest.raises(InvalidInput, match="rates"):
        ClusterSet.load(config, rates={"typo": ApiRate()})


def test_selected_contexts_only(tmp_path: Path) -> None:
    config = _simple(tmp_path / "config", "a", "b", "c", current="a")
    clusters = ClusterSet.load(config, contexts=["c", "b"])
    assert set(clusters.names()) == {"b", "c"}
    assert clusters.default_name == "c", "the current context is not selected: the first named"
    clusters = ClusterSet.load(config, contexts=["b", "zz"])
    assert [p.context for p in clusters.problems] == ["zz"]
    with pytest.raises(AdapterUnavailable, match="no such context"):
        clusters.cluster("zz")
    with pytest.raises(NotFound, match="never-heard-of") as raised:
        clusters.cluster("never-heard-of")
    assert raised.value.details["known"] == ["b"]


def test_nothing_secret_in_a_repr(tmp_path: Path) -> None:
    config = _simple(tmp_path / "config", "a", current="a")
    clusters = ClusterSet.load(config)
    assert SECRET not in repr(clusters)
    assert SECRET not in repr(clusters.default)
