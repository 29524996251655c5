"""Pure parts of volumes, usage, trial and import: what the daemon's answers become."""

from __future__ import annotations

import pytest
from pando_runtime_docker.features._firewall import Firewall, firewall_from_info, plan_refusal
from pando_runtime_docker.features._helper import HelperJob, helper_body
from pando_runtime_docker.features._image_import import loaded_references
from pando_runtime_docker.features._trial import observed_writes
from pando_runtime_docker.features._usage import UNKNOWN, cpu_millis, memory_bytes
from pando_runtime_docker.manifests import Naming

import pando_runtime as pr


def test_writes_are_the_deepest_changed_paths_outside_the_declared_ones() -> None:
    changes = [
        {"Path": "/var", "Kind": 0},
        {"Path": "/var/lib", "Kind": 0},
        {"Path": "/var/lib/app", "Kind": 1},
        {"Path": "/var/lib/app/db", "Kind": 1},
        {"Path": "/etc", "Kind": 0},
        {"Path": "/etc/motd", "Kind": 2},
        {"Path": "/srv", "Kind": 0},
        {"Path": "/srv/x", "Kind": 1},
    ]
    assert observed_writes(changes, ["/var/lib/app/"]) == ["/etc/motd", "/srv/x"]
    assert observed_writes(changes, []) == ["/etc/motd", "/srv/x", "/var/lib/app/db"]
    assert observed_writes([], ["/data"]) == []


def test_cpu_is_a_rate_over_two_samples_and_unknown_from_one() -> None:
    stats = {
        "cpu_stats": {
            "cpu_usage": {"total_usage": 1_500_000_000},
            "system_cpu_usage": 20_000_000_000,
            "online_cpus": 2,
        },
        "precpu_stats": {
            "cpu_usage": {"total_usage": 1_000_000_000},
            "system_cpu_usage": 18_000_000_000,
        },
    }
    assert cpu_millis(stats) == 500  # a quarter of the machine's 2 CPUs
    assert cpu_millis({**stats, "precpu_stats": {}}) == UNKNOWN
    assert memory_bytes({"memory_stats": {"usage": 100, "stats": {"cache": 30}}}) == 70
    assert memory_bytes({"memory_stats": {"usage": 100, "stats": {"inactive_file": 40}}}) == 60
    assert memory_bytes({}) == UNKNOWN


def test_a_helper_has_no_network_no_capabilities_but_its_own_and_no_owner_label() -> None:
    naming = Naming(owner="o1")
    body = helper_body(
        HelperJob(image="busybox", command=("tar", "-cf", "-", "."), capabilities=("CHOWN",)),
        naming,
    )
    host = body["HostConfig"]
    assert (host["NetworkMode"], body["NetworkDisabled"]) == ("none", True)
    assert (host["CapDrop"], host["CapAdd"]) == (["ALL"], ["CHOWN"])
    assert host["ReadonlyRootfs"] is True
    assert "no-new-privileges" in host["SecurityOpt"]
    assert body["Labels"] == {"io.pando.helper": "o1"}  # not the owner label: no workload
    assert (body["Entrypoint"], body["Cmd"]) == (["tar"], ["-cf", "-", "."])


def test_a_load_names_what_it_loaded_or_is_a_bad_archive() -> None:
    answer = '{"stream":"Loaded image: pando.test/x:1\\n"}\n'
    assert loaded_references(answer, 10) == ["pando.test/x:1"]
    assert loaded_references('{"stream":"Loaded image ID: sha256:ab\\n"}', 10) == ["sha256:ab"]
    with pytest.raises(pr.InvalidInput, match="unexpected EOF"):
        loaded_references('{"errorDetail":{"message":"unexpected EOF"}}', 10)
    with pytest.raises(pr.InvalidInput, match="holds no image"):
        loaded_references("", 0)


def test_a_load_that_could_not_unpack_fails_inside_a_successful_answer() -> None:
    # As the containerd image store answers (200, one stream line for the failure).
    answer = (
        '{"stream":"Loaded image: pando.test/app:1\\n"}\r\n'
        '{"stream":"Error unpacking image pando.test/app:1: failed to extract layer '
        'sha256:5b21fa92fbc3: permission denied\\n"}\r\n'
    )
    with pytest.raises(pr.AdapterFailed) as caught:
        loaded_references(answer, 1024)
    assert "permission denied" in caught.value.message
    assert caught.value.details["loaded"] == ["pando.test/app:1"]
    assert loaded_references(answer.splitlines()[0], 1024) == ["pando.test/app:1"]
    # A layer that is not the config's is a broken archive, on this store as on the classic one.
    broken = answer.replace("failed to extract layer", "wrong diff id calculated on extraction")
    with pytest.raises(pr.InvalidInput) as refused:
        loaded_references(broken, 1024)
    assert refused.value.problems[0].code == "bad_image_archive"


def test_the_firewall_info_names_decides_what_plans_are_refused() -> None:
    # /info's FirewallBackend (API 1.49): absent below it, null without a firewall.
    assert firewall_from_info({"ServerVersion": "20.10.24"}) is None
    source = "/info FirewallBackend"
    assert firewall_from_info({"FirewallBackend": None}) == Firewall("none", source)
    iptables = Firewall("iptables+firewalld", source)
    nftables = Firewall("nftables", source)
    assert firewall_from_info({"FirewallBackend": {"Driver": "iptables+firewalld"}}) == iptables
    assert firewall_from_info({"FirewallBackend": {"Driver": "nftables", "Info": []}}) == nftables
    assert iptables.usable
    assert not nftables.usable
    web = (pr.WorkloadPlan(name="web", image="pando.test/busybox:1"),)
    plain = pr.BundlePlan(bundle_id="plain", workloads=web)
    restricted = pr.BundlePlan(
        bundle_id="shut", workloads=web, network=pr.NetworkPlan(egress=pr.EgressPolicy(allow=()))
    )
    assert plan_refusal(nftables, plain, guarded=False) is None
    assert plan_refusal(iptables, restricted, guarded=True) is None
    refused = plan_refusal(nftables, restricted, guarded=False)
    assert isinstance(refused, pr.CapabilityUnsupported)
    assert refused.capability == "egress_restriction"
    assert "nftables" in refused.message
    assert "egress_gateway_image" in (refused.remedy or "")
    assert isinstance(plan_refusal(nftables, plain, guarded=True), pr.AdapterFailed)
