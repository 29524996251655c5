"""The real node's pure parts: its address plan, its configuration, the relay's routing.

Running the node is the real-node tests' part (``adapters/kubernetes/tests/test_real_node_*``);
these need no root and no server.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path

from localcluster.realnode import addons, configs, network
from localcluster.realnode.relay import Router


def test_every_address_of_the_node_is_reserved_and_none_routes_out() -> None:
    reserved = [
        ipaddress.ip_network("198.18.0.0/15"),  # benchmarking (RFC 2544)
        ipaddress.ip_network("203.0.113.0/24"),  # documentation (RFC 5737)
        ipaddress.ip_network("169.254.0.0/16"),  # link-local
    ]
    addresses = [
        network.NODE_IP,
        network.OUTSIDE_IP,
        network.API_SERVER_IP,
        network.POD_GATEWAY,
        network.METADATA_IP,
        *network.INTERNET_IPS,
    ]
    for address in addresses:
        ip = ipaddress.ip_address(address)
        assert any(ip in block for block in reserved), address
    assert ipaddress.ip_network(network.POD_CIDR).subnet_of(ipaddress.ip_network("198.18.0.0/15"))
    for host in addons.STANDIN_HOSTS.values():
        assert host in network.INTERNET_IPS


def test_the_relay_dials_node_and_pod_addresses_from_the_node() -> None:
    router = Router({network.LINK_CIDR: "node-ns", network.POD_CIDR: "node-ns"})
    assert router.space(network.NODE_IP) == "node-ns"
    assert router.space("198.18.0.7") == "node-ns"
    assert router.space("127.0.0.1") is None  # kwok and metrics-server: from the host
    assert router.space("localhost") is None


def test_the_node_is_configured_for_this_machine(tmp_path: Path) -> None:
    dirs = configs.NodeDirs(tmp_path)
    kubelet = json.loads(
        configs.kubelet_config(
            dirs,
            ca_file=tmp_path / "ca.crt",
            cgroup_root="/pando-1",
            taints=[configs.REAL_NODE_TAINT],
            healthz_port=1234,
        )
    )
    assert kubelet["failCgroupV1"] is False  # cgroup v1 here
    assert kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["readOnlyPort"] == 0
    assert kubelet["authorization"]["mode"] == "AlwaysAllow"
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["address"] == network.NODE_IP
    assert kubelet["registerWithTaints"] == [configs.REAL_NODE_TAINT]
    containerd = configs.containerd_config(dirs, sandbox_image="pando.local/pause:1")
    assert "restrict_oom_score_adj = true" in containerd  # no CAP_SYS_RESOURCE here
    assert "netns_mounts_under_state_dir = true" in containerd
    assert str(tmp_path) in containerd
    assert "/var/lib/containerd" not in containerd  # never the host's own containerd
    cni = json.loads(configs.cni_config(dirs))
    bridge = cni["plugins"][0]
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))
    proxy = json.loads(
        configs.kube_proxy_config(
            kubeconfig=tmp_path / "k", node_name="n", healthz_port=1, metrics_port=2
        )
    )
    assert proxy["mode"] == "iptables"
    assert proxy["conntrack"]["maxPerCore"] == 0  # the host-wide table is left alone


def test_pods_reach_the_real_node_through_the_runtime_class() -> None:
    runtime_class = addons.runtime_class("real")
    scheduling = runtime_class["scheduling"]
    assert scheduling["nodeSelector"] == {configs.REAL_NODE_LABEL: "real"}
    assert scheduling["tolerations"][0]["key"] == configs.REAL_NODE_TAINT["key"]
    gvisor = addons.runtime_class("real", sandboxed=True)
    assert (gvisor["metadata"]["name"], gvisor["handler"]) == ("gvisor", configs.SANDBOX_HANDLER)
    assert gvisor["scheduling"] == scheduling  # sandboxed pods land on the real node too
    corefile = addons.corefile("cluster.local", addons.STANDIN_HOSTS)
    assert "forward" not in corefile  # no name is sent anywhere beyond the cluster


def test_the_nodes_containerd_runs_gvisor_as_the_handler_runsc(tmp_path: Path) -> None:
    dirs = configs.NodeDirs(tmp_path)
    wrapper = tmp_path / "config" / "runsc"
    parsed = tomllib.loads(
        configs.containerd_config(dirs, sandbox_image="pando.local/pause:1", runsc=wrapper)
    )
    runtimes = parsed["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["runsc"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["runsc"]["options"]["BinaryName"] == str(wrapper)
    assert runtimes["runc"]["options"] == {"SystemdCgroup": False}  # runc stays the default
    plain = configs.containerd_config(dirs, sandbox_image="pando.local/pause:1")
    assert "runsc" not in plain
    script = configs.runsc_wrapper(Path("/opt/gvisor/runsc"))
    assert script.startswith("#!/bin/sh\n")
    assert 'RUNSC="/opt/gvisor/runsc"' in script


def test_each_of_several_nodes_has_its_own_namespace_address_and_pod_range() -> None:
    nodes = network.NodesNetwork.named("pando-1-rn1-", 3)
    assert nodes.namespaces == [
        "pando-1-rn1-node0",
        "pando-1-rn1-node1",
        "pando-1-rn1-node2",
        "pando-1-rn1-out",
    ]
    assert nodes.nodes[0].node_ip == network.NODE_IP  # the first is the one-node set's node
    assert nodes.nodes[0].pod_cidr == network.POD_CIDR
    link = ipaddress.ip_network(network.LINK_CIDR)
    pod_range = ipaddress.ip_network(network.POD_RANGE)
    ranges = [ipaddress.ip_network(n.pod_cidr) for n in nodes.nodes]
    for i, place in enumerate(nodes.nodes):
        assert ipaddress.ip_address(place.node_ip) in link
        assert ranges[i].subnet_of(pod_range)
        assert ipaddress.ip_address(place.pod_gateway) in ranges[i]
        assert not any(ranges[i].overlaps(r) for r in ranges[i + 1 :])
    assert len({n.node_ip for n in nodes.nodes} | {network.OUTSIDE_IP}) == 4
    assert pod_range.subnet_of(ipaddress.ip_network("198.18.0.0/15"))  # RFC 2544


def test_the_relay_dials_each_node_and_its_pods_from_that_nodes_namespace() -> None:
    nodes = network.NodesNetwork.named("p-", 2)
    router = Router(nodes.relay_routes())
    for place in nodes.nodes:
        assert router.space(place.node_ip) == place.node
        assert router.space(place.pod_gateway.rsplit(".", 1)[0] + ".9") == place.node
    assert router.space(network.OUTSIDE_IP) is None  # nothing else is dialled from a node
    assert router.space("127.0.0.1") is None


def test_the_node_set_asks_for_a_node_count_it_can_address() -> None:
    import pytest  # noqa: PLC0415

    for count in (0, network.MAX_NODES + 1):
        with pytest.raises(ValueError, match="real nodes"):
            network.NodesNetwork.named("p-", count)


def test_a_nodes_configuration_carries_its_own_addresses(tmp_path: Path) -> None:
    dirs = configs.NodeDirs(tmp_path)
    second = network.NodesNetwork.named("p-", 2).nodes[1]
    beat = configs.Heartbeat()
    kubelet = json.loads(
        configs.kubelet_config(
            dirs,
            ca_file=tmp_path / "ca.crt",
            cgroup_root="/p/node1",
            taints=[],
            healthz_port=1,
            node_ip=second.node_ip,
            heartbeat=beat,
        )
    )
    assert kubelet["address"] == second.node_ip
    assert kubelet["nodeLeaseDurationSeconds"] == beat.lease_seconds
    # The control plane calls the node lost only after several renewals were missed.
    assert beat.grace_seconds >= 2 * beat.lease_seconds
    assert beat.grace_seconds >= 4 * beat.status_update_seconds
    assert f"--node-monitor-grace-period={beat.grace_seconds}s" in beat.controller_manager_args()
    default = json.loads(
        configs.kubelet_config(
            dirs, ca_file=tmp_path / "ca", cgroup_root="/p", taints=[], healthz_port=1
        )
    )
    assert "nodeLeaseDurationSeconds" not in default  # one node keeps kubelet's defaults
    bridge = json.loads(
        configs.cni_config(dirs, pod_cidr=second.pod_cidr, gateway=second.pod_gateway)
    )["plugins"][0]
    assert bridge["ipam"]["ranges"] == [
        [{"subnet": second.pod_cidr, "gateway": second.pod_gateway}]
    ]
    proxy = json.loads(
        configs.kube_proxy_config(
            kubeconfig=tmp_path / "k", node_name="n", healthz_port=1, metrics_port=2,
            node_ip=second.node_ip,
        )
    )  # fmt: skip
    assert proxy["bindAddress"] == second.node_ip
    assert proxy["clusterCIDR"] == network.POD_RANGE  # every node's pods are the cluster's


def test_coredns_can_be_held_to_one_node() -> None:
    pod = next(
        d for d in addons.coredns_objects("img", node_name="real-node-0") if d["kind"] == "Pod"
    )
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "real-node-0"}
    anywhere = next(d for d in addons.coredns_objects("img") if d["kind"] == "Pod")
    assert "nodeSelector" not in anywhere["spec"]
