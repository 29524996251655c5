"""The converter round-trips every data type through JSON and is strict on the way in."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import pando_runtime as pr

NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)

SAMPLES: list[Any] = [
    pr.BundlePlan(
        bundle_id="app_1",
        workloads=(
            pr.WorkloadPlan(
                name="web",
                image="nginx:1",
                command=("nginx", "-g", "daemon off;"),
                env={"A": "1"},
                pull_auth=pr.RegistryAuth(registry="r.example", username="u", password="p"),
                mounts=(pr.Mount("v", "/data", read_only=True),),
                files=(pr.CarriedFile("/etc/x", b"\x00\x01binary", mode=0o600),),
                ports=(pr.Port(80), pr.Port(53, pr.PortProtocol.UDP)),
                health=pr.HealthCheck(http_path="/", port=80),
                resources=pr.Resources(cpu_millis=100, memory_bytes=1 << 20),
                log_bytes=1 << 20,
                exposed=True,
                privileges=pr.Privileges(capabilities=("NET_BIND_SERVICE",)),
            ),
        ),
        volumes=(pr.VolumePlan(volume_id="v", name="data", size_bytes=1 << 30),),
        network=pr.NetworkPlan(
            egress=pr.EgressPolicy(allow=(pr.EgressRule(destination="10.0.0.0/8", ports=(443,)),))
        ),
        labels={"a": "b"},
        first_deploy=True,
    ),
    pr.ObservedBundle(
        bundle_id="app_1",
        exists=True,
        workloads=(
            pr.ObservedWorkload(
                name="web",
                present=True,
                running=False,
                instance_id="i-1",
                image_digest="sha256:0",
                started_at=NOW,
                exit_code=137,
                healthy=None,
                oom_killed=True,
            ),
        ),
        volumes=(
            pr.ObservedVolume(
                volume_id="v", present=True, handle=pr.VolumeHandle(volume_id="v", handle="h")
            ),
        ),
    ),
    pr.BundleEvent(
        kind=pr.BundleEventKind.EXITED, at=NOW, bundle_id="a", workload="w", exit_code=1
    ),
    pr.Capacity(
        total_cpu_millis=4000,
        total_memory_bytes=1 << 33,
        reported_at=NOW,
        largest_fit=pr.Fit(cpu_millis=1000, memory_bytes=1 << 30),
        details={"nodes": "2"},
    ),
    pr.BundleUsage(
        bundle_id="a",
        reported_at=NOW,
        workloads=(pr.WorkloadUsage(workload="w", running=True, cpu_millis=1, memory_bytes=2),),
        volumes=(pr.VolumeUsage(volume_id="v", bytes=3),),
    ),
    pr.InUse(cpu_millis=1, memory_bytes=2, reported_at=NOW),
    pr.RuntimeCapabilities(
        isolation_class=pr.IsolationClass.VM,
        exec=True,
        image_delivery=(pr.ImageDelivery.IMPORT,),
        log_retention=pr.LogRetention(supports_size_cap=True, min_bytes=10),
        default_capabilities=("CHOWN",),
        grantable_capabilities=("CHOWN", "NET_RAW"),
    ),
    pr.TrialRequest(trial_id="t", image="x/y:1", isolation_floor=pr.IsolationClass.SANDBOXED),
    pr.TrialResult(started=True, exit_code=None, observed_ports=(pr.Port(80),), log=b"hi"),
    pr.EdgePlan(
        name="edge",
        image="traefik:3",
        ports=(pr.EdgePort(published=443, target=8443),),
        mounts=(pr.EdgeMount(path="/certs", volume_id="certs"),),
        certificates=(pr.EdgeCertificate(name="c", cert_pem="-----BEGIN", key_pem="-----BEGIN"),),
    ),
    pr.EdgeState(name="edge", present=True, running=False, detail="0 of 2 replicas ready"),
    pr.ExecRequest(command=("ls",), tty=True, env={"TERM": "xterm"}),
    pr.ExecResult(exit_code=None, stdout=b"o", stderr=b"e"),
    pr.LogOptions(follow=True, since=NOW, tail=10),
    pr.BundleHandle(bundle_id="a", handle="h", details={"k": "v"}),
    pr.DestroyOptions(keep_volumes=False),
    pr.Upstream(url="http://w.ns.svc:80", pool_key="k"),
    pr.WorkloadRef("a", "w"),
    pr.VolumeRequest(volume_id="v", bundle_id="a", name="n", size_bytes=1),
]


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_every_type_round_trips_through_json(value: Any) -> None:
    assert pr.from_json(pr.to_json(value), type(value)) == value


def test_bytes_travel_as_base64_and_isolation_by_name() -> None:
    data = pr.unstructure(SAMPLES[0])
    assert data["workloads"][0]["files"][0] == {
        "path": "/etc/x",
        "content_base64": "AAFiaW5hcnk=",
        "mode": 0o600,
    }
    assert pr.unstructure(pr.TrialResult(started=True, exit_code=0, log=b"hi"))["log"] == "aGk="
    caps = pr.unstructure(pr.RuntimeCapabilities(isolation_class=pr.IsolationClass.SANDBOXED))
    assert caps["isolation_class"] == "sandboxed"


def test_structuring_is_strict_and_lists_every_problem() -> None:
    data = {
        "bundle_id": 7,
        "workloads": [
            {"name": "a", "image": "x", "ports": [{"number": "80"}], "exposed": "yes"},
            {"name": "b", "image": "x", "env": {"A": 1}, "colour": "red"},
            {"image": "x"},
        ],
        "network": {"private": True, "surprise": 1},
    }
    with pytest.raises(pr.InvalidPlan) as caught:
        pr.structure(data, pr.BundlePlan)
    problems = {p.path: p for p in caught.value.problems}
    assert set(problems) == {
        "bundle_id",
        "workloads[0].ports[0].number",
        "workloads[0].exposed",
        "workloads[1].env['A']",
        "workloads[1].colour",
        "workloads[2].name",
        "network.surprise",
    }
    assert "valid keys are" in problems["workloads[1].colour"].message
    assert problems["workloads[2].name"].code == "missing"


def test_not_a_mapping_and_bad_json_are_refused() -> None:
    with pytest.raises(pr.InvalidPlan):
        pr.structure(["not", "a", "plan"], pr.BundlePlan)
    with pytest.raises(pr.InvalidPlan) as caught:
        pr.from_json("{nope", pr.BundlePlan)
    assert caught.value.problems[0].code == "syntax"


def test_bundle_files_in_yaml_and_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "app.yaml"
    yaml_file.write_text(
        "bundle_id: shop\n"
        "workloads:\n"
        "  - name: web\n"
        "    image: nginx:1.27\n"
        "    ports: [{number: 80}]\n"
        "    files:\n"
        "      - {path: /etc/motd, content: aGVsbG8=, encoding: base64}\n"
        "      - path: /etc/nginx/conf.d/site.conf\n"
        "        content: |\n"
        "          server {}\n"
        "      - {path: /etc/greeting, text: 'héllo', mode: 0600}\n"
        "      - path: /etc/blob\n"
        "        content_base64: |\n"
        "          AAFi\n"
        "          aW5hcnk=\n",
        encoding="utf-8",
    )
    plan = pr.load_bundle_file(yaml_file)
    assert plan.workloads[0].ports == (pr.Port(80),)
    assert [(f.path, f.content, f.mode) for f in plan.workloads[0].files] == [
        ("/etc/motd", b"hello", 0o644),
        ("/etc/nginx/conf.d/site.conf", b"server {}\n", 0o644),
        ("/etc/greeting", "héllo".encode(), 0o600),
        ("/etc/blob", b"\x00\x01binary", 0o644),
    ]
    json_file = tmp_path / "app.json"
    json_file.write_text(pr.to_json(plan), encoding="utf-8")
    assert pr.load_bundle_file(json_file) == plan
    bad = tmp_path / "bad.yaml"
    bad.write_text("bundle_id: [unclosed\n", encoding="utf-8")
    with pytest.raises(pr.InvalidPlan) as caught:
        pr.load_bundle_file(bad)
    assert caught.value.problems[0].code == "syntax"


def test_secrets_stay_out_of_repr() -> None:
    workload = pr.WorkloadPlan(
        name="web",
        image="nginx",
        env={"API_KEY": "env-secret-value"},
        pull_auth=pr.RegistryAuth(registry="r", username="u", password="hunter2"),
    )
    text = repr(pr.BundlePlan(bundle_id="a", workloads=(workload,)))
    assert "hunter2" not in text
    assert "env-secret-value" not in text
    assert "<1 variables>" in text


@pytest.mark.parametrize(
    ("content", "as_text"),
    [
        (b"", True),
        (b"server {}\n", True),
        (b"line\r\nwith crlf\r\n", True),
        (b"\tindented \xe2\x9c\x93\n", True),
        (b"\xef\xbb\xbfbom first", True),
        (b"\x00nul", False),
        (b"\x1b[31mescape", False),
        (b"\xff\xfe not utf-8", False),
        (bytes(range(256)), False),
    ],
)
def test_carried_files_round_trip_exactly_as_text_or_base64(content: bytes, as_text: bool) -> None:
    carried = pr.CarriedFile("/etc/f", content, mode=0o640)
    data = pr.unstructure(carried)
    assert set(data) == {"path", "content" if as_text else "content_base64", "mode"}
    assert pr.from_json(pr.to_json(carried), pr.CarriedFile) == carried
    assert pr.structure(data, pr.CarriedFile) == carried


def _file_problems(entry: dict[str, Any]) -> dict[str, pr.Problem]:
    plan = {"bundle_id": "a", "workloads": [{"name": "w", "image": "x", "files": [entry]}]}
    with pytest.raises(pr.InvalidPlan) as caught:
        pr.structure(plan, pr.BundlePlan)
    return {p.path.removeprefix("workloads[0].files[0]"): p for p in caught.value.problems}


def test_carried_file_mistakes_name_their_key() -> None:
    assert _file_problems({"path": "/f"})[""].code == "missing"
    assert _file_problems({"path": "/f", "text": "a", "content_base64": "YQ=="})[""].code == (
        "conflict"
    )
    assert set(_file_problems({"path": "/f", "content_base64": "!!"})) == {".content_base64"}
    assert set(_file_problems({"path": "/f", "text": 3, "mode": "644"})) == {".text", ".mode"}
    assert set(_file_problems({"path": "/f", "text": "a", "encoding": "base64"})) == {".encoding"}
    assert set(_file_problems({"path": "/f", "content": "a", "encoding": "gzip"})) == {".encoding"}
    unknown = _file_problems({"path": "/f", "content": "a", "data": "a"})
    assert "content_base64" in unknown[".data"].message
    assert _file_problems({"content": "a"})[".path"].code == "missing"


@pytest.mark.parametrize("key", ["content", "text", "content_base64"])
def test_a_file_over_the_size_cap_is_refused_with_its_path(key: str) -> None:
    big = b"x" * (pr.plugin.MAX_CARRIED_FILES_BYTES + 1)
    value = base64.b64encode(big).decode() if key == "content_base64" else big.decode()
    problems = _file_problems({"path": "/srv/big.bin", key: value})
    assert set(problems) == {f".{key}"}
    assert problems[f".{key}"].code == "too_large"
    assert "'/srv/big.bin'" in problems[f".{key}"].message
    assert str(pr.plugin.MAX_CARRIED_FILES_BYTES + 1) in problems[f".{key}"].message
