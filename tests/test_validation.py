"""Plan validation lists every problem with its path; check_plan raises the right error."""

from __future__ import annotations

import attrs
import pytest

import pando_runtime as pr


def _plan(*workloads: pr.WorkloadPlan, **fields: object) -> pr.BundlePlan:
    return pr.BundlePlan(
        bundle_id=str(fields.pop("bundle_id", "app_1")),
        workloads=workloads or (pr.WorkloadPlan(name="web", image="nginx:1.27"),),
        **fields,  # type: ignore[arg-type]
    )


def _paths(plan: pr.BundlePlan, caps: pr.RuntimeCapabilities | None = None) -> set[str]:
    return {p.path for p in pr.validate_plan(plan, caps)}


def test_a_good_plan_has_no_problems() -> None:
    volume = pr.VolumePlan(volume_id="vol_1", name="data", size_bytes=1024)
    plan = _plan(
        pr.WorkloadPlan(
            name="db",
            image="registry.example:5000/team/postgres:16@sha256:" + "a" * 64,
            ports=(pr.Port(5432),),
            mounts=(pr.Mount("vol_1", "/var/lib/postgresql"),),
            env={"POSTGRES_PASSWORD": "s3cret", "_X1": "y"},
            health=pr.HealthCheck(command=("pg_isready",)),
            resources=pr.Resources(cpu_millis=500, memory_bytes=512 * 1024**2),
        ),
        pr.WorkloadPlan(
            name="api",
            image="ghcr.io/example/api:v2",
            depends_on=("db",),
            ports=(pr.Port(8080), pr.Port(8080, pr.PortProtocol.UDP)),
            files=(pr.CarriedFile("/etc/api.toml", b"x = 1\n"),),
            health=pr.HealthCheck(http_path="/healthz", port=8080),
        ),
        volumes=(volume,),
        labels={"pando.dev/app": "shop", "tier": "web"},
    )
    assert pr.validate_plan(plan) == []
    pr.check_plan(plan)


def test_every_problem_is_listed_with_its_path() -> None:
    plan = pr.BundlePlan(
        bundle_id="-bad id-",
        workloads=(
            pr.WorkloadPlan(name="web", image="nginx"),
            pr.WorkloadPlan(
                name="Web_2",
                image="UPPER/Case:tag",
                working_dir="relative",
                env={"1BAD": "x", "OK": "y"},
                ports=(pr.Port(0), pr.Port(70000), pr.Port(80), pr.Port(80)),
                mounts=(pr.Mount("nope", "/data"), pr.Mount("vol", "data")),
                files=(pr.CarriedFile("/data", b""), pr.CarriedFile("/a/../b", b"")),
                depends_on=("web", "ghost", "Web_2"),
                resources=pr.Resources(cpu_millis=0, memory_bytes=-1),
                health=pr.HealthCheck(command=("true",), http_path="x", retries=0),
                log_bytes=0,
            ),
            pr.WorkloadPlan(name="web", image="nginx"),
        ),
        volumes=(pr.VolumePlan(volume_id="vol", name=""), pr.VolumePlan(volume_id="vol", name="x")),
        network=pr.NetworkPlan(private=False),
        labels={"bad key!": "v", "ok": "bad value with spaces"},
    )
    paths = _paths(plan)
    expected = {
        "bundle_id",
        "workloads[1].name",
        "workloads[1].image",
        "workloads[1].working_dir",
        "workloads[1].env['1BAD']",
        "workloads[1].ports[0].number",
        "workloads[1].ports[1].number",
        "workloads[1].ports[3]",
        "workloads[1].mounts[0].volume_id",
        "workloads[1].mounts[1].path",
        "workloads[1].files[0].path",
        "workloads[1].files[1].path",
        "workloads[1].depends_on[1]",
        "workloads[1].depends_on[2]",
        "workloads[1].resources.cpu_millis",
        "workloads[1].resources.memory_bytes",
        "workloads[1].health",
        "workloads[1].health.http_path",
        "workloads[1].health.port",
        "workloads[1].health.retries",
        "workloads[1].log_bytes",
        "workloads[2].name",
        "volumes[0].name",
        "volumes[1].volume_id",
        "network.private",
        "labels['bad key!']",
        "labels['ok']",
    }
    assert expected <= paths, expected - paths
    with pytest.raises(pr.InvalidPlan) as caught:
        pr.check_plan(plan)
    assert caught.value.code == "INVALID_PLAN"
    assert len(caught.value.problems) >= len(expected)
    assert caught.value.details["problems"][0]["path"]


def test_dependency_cycles_are_found() -> None:
    plan = _plan(
        pr.WorkloadPlan(name="a", image="x/a:1", depends_on=("b",)),
        pr.WorkloadPlan(name="b", image="x/b:1", depends_on=("c",)),
        pr.WorkloadPlan(name="c", image="x/c:1", depends_on=("a",)),
        pr.WorkloadPlan(name="d", image="x/d:1", depends_on=("a",)),
    )
    cycles = [p for p in pr.validate_plan(plan) if p.code == "cycle"]
    assert len(cycles) == 1
    assert "a -> b -> c -> a" in cycles[0].message


def test_start_order_puts_dependencies_first() -> None:
    plan = _plan(
        pr.WorkloadPlan(name="web", image="x/web:1", depends_on=("api",)),
        pr.WorkloadPlan(name="api", image="x/api:1", depends_on=("db", "cache")),
        pr.WorkloadPlan(name="cache", image="x/cache:1"),
        pr.WorkloadPlan(name="db", image="x/db:1"),
    )
    assert [w.name for w in plan.start_order()] == ["db", "cache", "api", "web"]


def test_carried_files_have_a_size_limit() -> None:
    big = pr.CarriedFile("/big", b"x" * (pr.plugin.MAX_CARRIED_FILES_BYTES + 1))
    plan = _plan(pr.WorkloadPlan(name="web", image="nginx", files=(big,)))
    problems = {p.path: p for p in pr.validate_plan(plan)}
    assert set(problems) == {"workloads[0].files[0].content"}
    assert "'/big'" in problems["workloads[0].files[0].content"].message
    half = b"x" * (pr.plugin.MAX_CARRIED_FILES_BYTES // 2 + 1)
    two = (pr.CarriedFile("/a", half), pr.CarriedFile("/b", half))
    plan = _plan(pr.WorkloadPlan(name="web", image="nginx", files=two))
    assert _paths(plan) == {"workloads[0].files"}


@pytest.mark.parametrize(
    "image",
    ["nginx", "nginx:1.27", "library/nginx", "localhost:5000/a/b:c", "a.b/c@sha256:" + "0" * 64],
)
def test_valid_images(image: str) -> None:
    assert pr.plugin.is_valid_image(image)


@pytest.mark.parametrize("image", ["", "Nginx", "nginx:", "a b", "nginx@sha256:short", ":tag"])
def test_invalid_images(image: str) -> None:
    assert not pr.plugin.is_valid_image(image)


def test_capabilities_turn_features_into_problems() -> None:
    caps = pr.RuntimeCapabilities(multiple_workloads=False)
    plan = _plan(
        pr.WorkloadPlan(
            name="a",
            image="x/a:1",
            files=(pr.CarriedFile("/f", b"1"),),
            resources=pr.Resources(cpu_millis=1),
            mounts=(pr.Mount("v1", "/data"),),
            log_bytes=10,
        ),
        pr.WorkloadPlan(name="b", image="x/b:1"),
        volumes=(pr.VolumePlan(volume_id="v1", name="data"),),
        network=pr.NetworkPlan(egress=pr.EgressPolicy()),
    )
    problems = pr.validate_plan(plan, caps)
    assert {p.capability for p in problems} == {
        "multiple_workloads",
        "persistent_volumes",
        "egress_restriction",
        "carried_files",
        "resource_limits",
        "log_size_cap",
    }
    assert pr.validate_plan(plan) == []
    with pytest.raises(pr.CapabilityUnsupported) as caught:
        pr.check_plan(plan, caps)
    assert caught.value.capability == "multiple_workloads"
    assert isinstance(caught.value, NotImplementedError)
    assert len(caught.value.details["problems"]) == 6


def test_max_workloads_per_bundle() -> None:
    caps = pr.RuntimeCapabilities(max_workloads_per_bundle=1)
    plan = _plan(pr.WorkloadPlan(name="a", image="x/a:1"), pr.WorkloadPlan(name="b", image="x/b:1"))
    assert [p.path for p in pr.validate_plan(plan, caps)] == ["workloads"]


def test_volume_trial_and_edge_requests_are_validated() -> None:
    volume = pr.VolumeRequest(volume_id="", bundle_id="ok", name="", size_bytes=0)
    assert {p.path for p in pr.plugin.validate_volume_request(volume)} == {
        "volume_id",
        "name",
        "size_bytes",
    }
    trial = pr.TrialRequest(
        trial_id="t 1", image="BAD", declared_paths=("rel",), timeout_seconds=0, env={"9": "x"}
    )
    assert {p.path for p in pr.plugin.validate_trial(trial)} == {
        "trial_id",
        "image",
        "declared_paths[0]",
        "timeout_seconds",
        "env['9']",
    }
    edge = pr.EdgePlan(
        name="edge",
        image="traefik:3",
        ports=(pr.EdgePort(published=80, target=0), pr.EdgePort(published=80, target=80)),
        certificates=(pr.EdgeCertificate(name="c", cert_pem="nope", key_pem="nope"),),
    )
    assert {p.path for p in pr.plugin.validate_edge(edge)} == {
        "ports[0].target",
        "ports[1].published",
        "certificates[0]",
    }


def test_exec_requests_are_validated() -> None:
    assert pr.plugin.validate_exec_request(pr.ExecRequest(command=("true",), env={"OK": "1"})) == []
    bad = pr.ExecRequest(command=(), env={"1BAD": "x"})
    assert {p.path for p in pr.plugin.validate_exec_request(bad)} == {"command", "env['1BAD']"}


@pytest.mark.anyio
async def test_an_exec_request_without_a_command_is_refused_by_the_fake() -> None:
    async with pr.testing.FakeAdapter() as adapter:
        await adapter.apply(
            pr.BundlePlan(bundle_id="app", workloads=(pr.WorkloadPlan(name="w", image="busybox"),))
        )
        with pytest.raises(pr.InvalidPlan) as refused:
            async with adapter.exec(
                pr.WorkloadRef(bundle_id="app", workload="w"), pr.ExecRequest(command=())
            ):
                pass
        assert [p.path for p in refused.value.problems] == ["command"]


def _egress_plan(*rules: pr.EgressRule) -> pr.BundlePlan:
    return _plan(
        pr.WorkloadPlan(name="a", image="x/a:1"),
        network=pr.NetworkPlan(egress=pr.EgressPolicy(allow=rules)),
    )


@pytest.mark.parametrize(
    "destination",
    ["203.0.113.0/24", "198.51.100.7/32", "198.51.100.7", "2001:db8::/32", "::/0"],
)
def test_a_cidr_rule_is_valid(destination: str) -> None:
    rule = pr.EgressRule(destination=destination, ports=(443,))
    assert rule.is_cidr
    assert pr.validate_plan(_egress_plan(rule)) == []


@pytest.mark.parametrize("destination", ["api.example.com", "a-b.c0.example", "x.io"])
def test_a_host_name_rule_is_valid(destination: str) -> None:
    rule = pr.EgressRule(destination=destination)
    assert not rule.is_cidr
    assert pr.validate_plan(_egress_plan(rule)) == []


@pytest.mark.parametrize(
    ("destination", "says"),
    [
        ("10.0.0.1/8", "host bits"),
        ("2001:db8::1/32", "host bits"),
        ("localhost", "fully qualified"),
        ("API.example.com", "neither"),
        ("-bad.example.com", "neither"),
        ("a..example.com", "neither"),
        ("http://api.example.com", "neither"),
        ("api.example.com:443", "neither"),
        ("1.2.3", "fully qualified"),
        ("a" * 64 + ".example.com", "neither"),
    ],
)
def test_a_bad_destination_is_invalid_by_path(destination: str, says: str) -> None:
    problems = pr.validate_plan(_egress_plan(pr.EgressRule(destination=destination)))
    assert [(p.path, p.code) for p in problems] == [
        ("network.egress.allow[0].destination", "bad_destination")
    ]
    assert says in problems[0].message


def test_host_name_rules_need_their_own_capability() -> None:
    caps = pr.RuntimeCapabilities(egress_restriction=True)
    plan = _egress_plan(
        pr.EgressRule(destination="203.0.113.0/24", ports=(443,)),
        pr.EgressRule(destination="api.example.com", ports=(443,)),
    )
    problems = pr.validate_plan(plan, caps)
    assert [(p.path, p.capability) for p in problems] == [
        ("network.egress.allow[1].destination", "egress_host_names")
    ]
    with pytest.raises(pr.CapabilityUnsupported) as caught:
        pr.check_plan(plan, caps)
    assert caught.value.capability == "egress_host_names"
    assert pr.validate_plan(plan, attrs.evolve(caps, egress_host_names=True)) == []
    # Without enforcement at all the whole policy is refused once, CIDR rules included.
    problems = pr.validate_plan(plan, pr.RuntimeCapabilities())
    assert [(p.path, p.capability) for p in problems] == [("network.egress", "egress_restriction")]


def test_an_egress_policy_allows_what_its_rules_name() -> None:
    policy = pr.EgressPolicy(
        allow=(
            pr.EgressRule(destination="203.0.113.0/24", ports=(443,)),
            pr.EgressRule(destination="2001:db8::/32"),
            pr.EgressRule(destination="api.example.com", ports=(443, 8443)),
        )
    )
    assert policy.allows("203.0.113.9", 443)
    assert not policy.allows("203.0.113.9", 80)
    assert not policy.allows("203.0.114.9", 443)
    assert policy.allows("2001:db8::5", 22), "a rule without ports allows every port"
    assert policy.allows("API.example.com", 8443)
    assert not policy.allows("api.example.com", 80)
    assert not policy.allows("other.example.com", 443)
    assert not pr.EgressPolicy().allows("203.0.113.9", 443), "an empty allow-list denies all"


def test_a_trial_is_checked_against_the_egress_rules() -> None:
    trial = pr.TrialRequest(
        trial_id="t1",
        image="x/a:1",
        egress=pr.EgressPolicy(
            allow=(
                pr.EgressRule(destination="10.0.0.1/8"),
                pr.EgressRule(destination="api.example.com"),
            )
        ),
    )
    assert [p.path for p in pr.plugin.validate_trial(trial)] == ["egress.allow[0].destination"]
    caps = pr.RuntimeCapabilities(egress_restriction=True)
    assert [p.path for p in pr.plugin.validate_trial(trial, caps)] == [
        "egress.allow[0].destination",
        "egress.allow[1].destination",
    ]


def _asking(*capabilities: str) -> pr.BundlePlan:
    privileges = pr.Privileges(capabilities=capabilities)
    return _plan(pr.WorkloadPlan(name="web", image="nginx:1.27", privileges=privileges))


def test_a_capability_is_named_as_linux_names_it_once() -> None:
    problems = pr.validate_plan(_asking("NET_RAW", "CAP_SYS_ADMIN", "net_admin", "NET_RAW"))
    assert [(p.path, p.code) for p in problems] == [
        ("workloads[0].privileges.capabilities[1]", "bad_capability"),
        ("workloads[0].privileges.capabilities[2]", "bad_capability"),
        ("workloads[0].privileges.capabilities[3]", "duplicate"),
    ]
    assert "write 'SYS_ADMIN'" in problems[0].message
    with pytest.raises(pr.InvalidPlan) as caught:
        pr.check_plan(_asking("ALL"))
    assert isinstance(caught.value, pr.InvalidInput)
    assert [p.path for p in caught.value.problems] == ["workloads[0].privileges.capabilities[0]"]
    assert "NET_RAW" in pr.LINUX_CAPABILITIES
    assert len(pr.LINUX_CAPABILITIES) == 41


def test_a_runtime_grants_only_the_capabilities_it_declares() -> None:
    caps = pr.RuntimeCapabilities(grantable_capabilities=("CHOWN", "NET_BIND_SERVICE"))
    assert caps.supports(pr.Capability.GRANTABLE_CAPABILITIES)
    assert not pr.RuntimeCapabilities().supports("grantable_capabilities")
    assert pr.validate_plan(_asking("NET_BIND_SERVICE"), caps) == []
    plan = _asking("NET_BIND_SERVICE", "NET_RAW")
    problems = pr.validate_plan(plan, caps)
    assert [(p.path, p.capability) for p in problems] == [
        ("workloads[0].privileges.capabilities[1]", "grantable_capabilities")
    ]
    assert "'NET_RAW'" in problems[0].message
    assert "CHOWN, NET_BIND_SERVICE" in problems[0].message
    with pytest.raises(pr.CapabilityUnsupported) as caught:
        pr.check_plan(plan, caps)
    assert caught.value.capability == "grantable_capabilities"
    # A runtime that grants nothing refuses every ask, and a plan that asks nothing passes.
    assert _paths(_asking("CHOWN"), pr.RuntimeCapabilities()) == {
        "workloads[0].privileges.capabilities[0]"
    }
    assert pr.validate_plan(_plan(), pr.RuntimeCapabilities()) == []
