"""Pure logic of the Docker adapter: version rules, frames, the spec hash, names, events, pull
errors and image IDs (as newer engines and the containerd image store write them)."""

from __future__ import annotations

import io
import struct
import tarfile
from datetime import UTC, datetime

import attrs
import pytest
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.api import (
    FrameDecoder,
    StreamKind,
    image_id,
    negotiate_version,
    progress_error,
)
from pando_runtime_docker.cache import parse_event, parse_time, view_from_inspect
from pando_runtime_docker.manifests import (
    LogCap,
    Naming,
    container_request,
    files_tar,
    free_subnet,
)

import pando_runtime as pr
from pando_runtime.plugin import APP_CAPABILITIES

NAMING = Naming(owner="pando")


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(payload)) + payload


# -- version negotiation ---------------------------------------------------------------------


def test_the_lower_of_ours_and_the_daemons_is_spoken() -> None:
    assert negotiate_version("1.41") == "1.41"
    assert negotiate_version("1.43") == "1.43"
    assert negotiate_version("1.52") == "1.51"  # a newer daemon still answers our newest


def test_a_daemon_older_than_20_10_is_refused_with_a_coded_error() -> None:
    with pytest.raises(pr.AdapterUnavailable) as caught:
        negotiate_version("1.40", host="unix:///x.sock")
    assert caught.value.code == "ADAPTER_UNAVAILABLE"
    assert "1.41" in caught.value.message
    assert "20.10" in caught.value.remedy
    assert caught.value.details["daemon_api"] == "1.40"


def test_an_unreadable_version_is_refused() -> None:
    with pytest.raises(pr.AdapterUnavailable):
        negotiate_version("one.forty")


def test_bad_settings_are_refused_each_with_its_path() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        DockerAdapter({"host": "ftp://x", "owner": "Not Valid", "upstream_mode": "magic"})
    assert {p.path for p in caught.value.problems} == {"host", "owner", "upstream_mode"}


# -- frames --------------------------------------------------------------------------------------


def test_frames_split_across_every_boundary_come_out_whole() -> None:
    data = frame(1, b"hello ") + frame(2, b"oops") + frame(1, b"world") + frame(1, b"")
    for cut in range(1, len(data)):
        decoder = FrameDecoder()
        pieces = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        out = b"".join(p for k, p in pieces if k is StreamKind.STDOUT)
        err = b"".join(p for k, p in pieces if k is StreamKind.STDERR)
        assert (out, err) == (b"hello world", b"oops"), cut
        assert not decoder.pending


def test_a_cut_frame_is_pending() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(frame(1, b"abcdef")[:-2]) == [(StreamKind.STDOUT, b"abcd")]
    assert decoder.pending


# -- the spec hash -------------------------------------------------------------------------------


def _plan(**fields: object) -> pr.BundlePlan:
    fields.setdefault("image", "pando.test/busybox:1")
    workload = pr.WorkloadPlan(name="web", **fields)  # type: ignore[arg-type]
    return pr.BundlePlan(bundle_id="app", workloads=(workload,))


def _spec(plan: pr.BundlePlan, **settings: int) -> str:
    request = container_request(
        plan,
        plan.workloads[0],
        NAMING,
        log_cap=LogCap(max_bytes=settings.get("log", 1 << 20), files=2),
        stop_timeout=settings.get("stop", 2),
        pids_limit=settings.get("pids", 100),
    )
    return request.spec


CHANGES = {
    "image": {"image": "pando.test/busybox:2"},
    "command": {"command": ("sleep", "1")},
    "entrypoint": {"entrypoint": ("/bin/sh",)},
    "working_dir": {"working_dir": "/srv"},
    "env": {"env": {"A": "2"}},
    "files": {"files": (pr.CarriedFile("/etc/a", b"2"),)},
    "file mode": {"files": (pr.CarriedFile("/etc/a", b"1", mode=0o600),)},
    "mounts": {"mounts": (pr.Mount("vol-1", "/data"),)},
    "ports": {"ports": (pr.Port(8080),)},
    "health": {"health": pr.HealthCheck(command=("true",))},
    "cpu": {"resources": pr.Resources(cpu_millis=500)},
    "memory": {"resources": pr.Resources(memory_bytes=64 << 20)},
    "log cap": {"log_bytes": 4096},
    "privileges": {"privileges": pr.Privileges(capabilities=("NET_RAW",))},
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_field_of_the_plan_changes_the_spec(change: str) -> None:
    base = {"env": {"A": "1"}, "files": (pr.CarriedFile("/etc/a", b"1"),)}
    assert _spec(_plan(**base)) != _spec(_plan(**{**base, **CHANGES[change]}))


def test_the_same_plan_gives_the_same_spec_and_exposure_changes_nothing() -> None:
    plan = _plan(env={"B": "1", "A": "2"}, ports=(pr.Port(80),))
    assert _spec(plan) == _spec(plan)
    exposed = attrs.evolve(plan, workloads=(attrs.evolve(plan.workloads[0], exposed=True),))
    assert _spec(exposed) == _spec(plan)


def test_settings_that_reach_the_container_change_the_spec() -> None:
    plan = _plan()
    assert _spec(plan) != _spec(plan, stop=5)
    assert _spec(plan) != _spec(plan, pids=0)
    assert _spec(plan) != _spec(plan, log=1 << 22)


def test_secret_values_are_in_the_env_only_never_in_a_label() -> None:
    plan = _plan(env={"TOKEN": "sekret-value-123"})
    request = container_request(
        plan,
        plan.workloads[0],
        NAMING,
        log_cap=LogCap(max_bytes=1 << 20, files=2),
        stop_timeout=2,
        pids_limit=0,
    )
    assert "TOKEN=sekret-value-123" in request.body["Env"]
    assert "sekret-value-123" not in repr(request.body["Labels"])
    assert "sekret-value-123" not in repr(request)
    assert request.body["HostConfig"]["RestartPolicy"] == {"Name": "no"}
    aliases = request.body["NetworkingConfig"]["EndpointsConfig"]["pando.app"]["Aliases"]
    assert aliases == ["web"]


def test_every_workload_is_hardened_and_gets_what_its_plan_asks() -> None:
    def host(**fields: object) -> dict[str, object]:
        plan = _plan(**fields)
        log_cap = LogCap(max_bytes=1 << 20, files=2)
        request = container_request(
            plan, plan.workloads[0], NAMING, log_cap=log_cap, stop_timeout=2, pids_limit=100
        )
        return request.body["HostConfig"]  # type: ignore[no-any-return]

    plain = host()
    assert plain["CapDrop"] == ["ALL"]
    assert plain["CapAdd"] == sorted(APP_CAPABILITIES)
    assert "NET_RAW" not in plain["CapAdd"]
    assert plain["SecurityOpt"] == ["no-new-privileges"]
    assert plain["PidsLimit"] == 100
    assert "seccomp=unconfined" not in repr(plain), "the Engine's default profile applies"
    asking = host(privileges=pr.Privileges(capabilities=("NET_RAW",)))
    assert asking["CapAdd"] == sorted({*APP_CAPABILITIES, "NET_RAW"})


def test_the_files_tar_names_every_parent_directory() -> None:
    data = files_tar((pr.CarriedFile("/etc/app/conf.d/a.conf", b"x", mode=0o600),))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert list(members) == ["etc", "etc/app", "etc/app/conf.d", "etc/app/conf.d/a.conf"]
    assert members["etc/app"].isdir()
    assert members["etc/app/conf.d/a.conf"].mode == 0o600


def test_subnets_are_carved_around_taken_ones() -> None:
    taken = ["10.231.0.0/24", "10.231.1.0/25", "not a subnet"]
    assert free_subnet("10.231.0.0/16", 24, taken) == "10.231.2.0/24"
    assert free_subnet("10.231.0.0/24", 24, taken) is None


# -- the cache's projections ---------------------------------------------------------------------


def test_engine_times_parse_to_utc() -> None:
    assert parse_time("0001-01-01T00:00:00Z") is None
    parsed = parse_time("2026-12-04T17:36:15.605035123Z")
    assert parsed == datetime(2026, 12, 4, 17, 36, 15, 605035, tzinfo=UTC)
    assert parse_time("2026-12-04T17:36:15Z") == datetime(2026, 12, 4, 17, 36, 15, tzinfo=UTC)


def _inspect(owner: str = "pando", **state: object) -> dict[str, object]:
    labels = {"io.pando.owner": owner, "io.pando.bundle": "app", "io.pando.workload": "web"}
    return {
        "Id": "c1",
        "Created": "2026-12-04T17:00:00Z",
        "Image": "sha256:abc",
        "Config": {"Labels": labels},
        "State": {
            "Status": "running",
            "Running": True,
            "StartedAt": "2026-12-04T17:00:01Z",
            **state,
        },
        "NetworkSettings": {"Networks": {"pando.app": {"IPAddress": "10.231.0.2"}}},
    }


def test_another_owners_container_is_not_seen() -> None:
    assert view_from_inspect(_inspect(owner="someone-else"), NAMING) is None


def test_an_oom_killed_exit_is_reported_with_its_code() -> None:
    view = view_from_inspect(
        _inspect(Status="exited", Running=False, ExitCode=137, OOMKilled=True), NAMING
    )
    assert view is not None
    observed = view.observed()
    assert (observed.running, observed.exit_code, observed.oom_killed) == (False, 137, True)
    assert view.address == "10.231.0.2"


def test_a_container_that_could_not_start_says_why() -> None:
    view = view_from_inspect(
        _inspect(
            Status="created",
            Running=False,
            StartedAt="0001-01-01T00:00:00Z",
            ExitCode=127,
            Error='exec: "nope": executable file not found',
        ),
        NAMING,
    )
    assert view is not None
    observed = view.observed()
    assert observed.problem is pr.WorkloadProblem.CANNOT_START
    assert observed.exit_code is None
    assert "executable file not found" in observed.problem_detail


def _event(action: str, owner: str = "pando", **attributes: str) -> dict[str, object]:
    return {
        "Type": "container",
        "Action": action,
        "Actor": {
            "ID": "c1",
            "Attributes": {
                "io.pando.owner": owner,
                "io.pando.bundle": "app",
                "io.pando.workload": "web",
                **attributes,
            },
        },
        "time": 1_700_000_000,
        "timeNano": 1_700_000_000_500_000_000,
    }


def test_events_move_the_view_and_become_bundle_events() -> None:
    started = parse_event(_event("start"), NAMING)
    assert started is not None
    view = started.apply_to(None)
    assert view is not None
    assert view.running
    event = started.bundle_event(oom=False)
    assert event is not None
    assert event.kind is pr.BundleEventKind.STARTED
    died = parse_event(_event("die", exitCode="4"), NAMING)
    assert died is not None
    ended = died.apply_to(view)
    assert ended is not None
    assert (ended.running, ended.exit_code) == (False, 4)
    exited = died.bundle_event(oom=False)
    assert exited is not None
    assert (exited.kind, exited.exit_code) == (pr.BundleEventKind.EXITED, 4)
    oom = died.bundle_event(oom=True)
    assert oom is not None
    assert oom.kind is pr.BundleEventKind.OOM_KILLED
    health = parse_event(_event("health_status: unhealthy"), NAMING)
    assert health is not None
    changed = health.bundle_event(oom=False)
    assert changed is not None
    assert changed.healthy is False
    destroyed = parse_event(_event("destroy"), NAMING)
    assert destroyed is not None
    assert destroyed.apply_to(ended) is None


def test_events_of_other_owners_are_ignored() -> None:
    assert parse_event(_event("start", owner="other"), NAMING) is None
    assert parse_event({**_event("start"), "Type": "network"}, NAMING) is None


def test_runtime_settings_are_checked_and_each_plan_gets_the_weakest_that_meets_it() -> None:
    with pytest.raises(pr.InvalidConfig) as caught:
        DockerAdapter({"oci_runtime": "no spaces!", "sandbox_runtime": "runc"})
    assert [(p.path, p.code) for p in caught.value.problems] == [
        ("oci_runtime", "invalid"),
        ("sandbox_runtime", "not_a_sandbox"),
    ], caught.value.problems
    both = DockerAdapter({"host": "unix:///nowhere.sock", "sandbox_runtime": "runsc"}).runtimes
    assert both.isolation_class is pr.IsolationClass.SANDBOXED
    assert both.for_isolation(pr.IsolationClass.PROCESS) is None  # the daemon's default
    assert both.for_isolation(pr.IsolationClass.CONTAINER) is None
    assert both.for_isolation(pr.IsolationClass.SANDBOXED) == "runsc"
    only = DockerAdapter({"host": "unix:///nowhere.sock", "oci_runtime": "kata-qemu"}).runtimes
    assert only.for_isolation(pr.IsolationClass.PROCESS) == "kata-qemu"
    plain = DockerAdapter({"host": "unix:///nowhere.sock", "oci_runtime": "crun"}).runtimes
    assert plain.isolation_class is pr.IsolationClass.CONTAINER


# -- image streams and IDs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ({"errorDetail": {"message": "denied"}, "error": "old words"}, "denied"),
        ({"errorDetail": {"message": "denied"}}, "denied"),  # without the deprecated field
        ({"error": "denied"}, "denied"),  # an engine that sends only the old field
        ({"errorDetail": {}}, "the daemon reported an error it did not describe"),
        ({"status": "Downloading", "progressDetail": {"current": 1}}, None),
    ],
)
def test_a_progress_error_is_read_from_error_detail_first(
    message: dict[str, object], reason: str | None
) -> None:
    assert progress_error(message) == reason


def test_image_ids_have_one_form_whatever_the_store_wrote() -> None:
    hex_id = "ab" * 32
    for written in (f"sha256:{hex_id}", hex_id, f"sha256:{hex_id.upper()}"):
        assert image_id(written) == f"sha256:{hex_id}"
    assert image_id("pando.test/app:1") is None
    assert image_id(f"pando.test/app@sha256:{hex_id}") is None  # a name, not an ID
