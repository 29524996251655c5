"""Every pod the adapter writes is hardened: seccomp, capabilities, no privilege escalation.

The objects only (pure builders); ``test_real_node_hardening`` shows the same in effect.
"""

from __future__ import annotations

from typing import Any

import pytest
from pando_runtime_kubernetes._info import KubernetesConfig
from pando_runtime_kubernetes.features._canary import canary_objects
from pando_runtime_kubernetes.features._edge import edge_objects
from pando_runtime_kubernetes.features._trial import trial_objects
from pando_runtime_kubernetes.features._volumes import helper_pod
from pando_runtime_kubernetes.manifests import _security as security
from pando_runtime_kubernetes.manifests import _workload_objects as workload_objects
from pando_runtime_kubernetes.manifests._network import AppNetwork

from pando_runtime import (
    EdgePlan,
    EgressPolicy,
    EgressRule,
    Privileges,
    TrialRequest,
    WorkloadPlan,
)

KEY = b"k" * 32
SETTINGS = workload_objects.PodSettings(runtime_class="gvisor")
DEFAULTS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_BIND_SERVICE", "SETGID",
            "SETUID"]  # fmt: skip
RUNTIME_DEFAULTS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
"""containerd's and Docker's default capability set (what a pod ran with before)."""
BASELINE_ADDS = RUNTIME_DEFAULTS - {"NET_RAW"}
"""What Pod Security's baseline level lets a container add (the admission backstop's list)."""


def _app_pod(**fields: Any) -> dict[str, Any]:
    w = WorkloadPlan(name="web", image="registry.example/app:1", **fields)
    digest = workload_objects.workload_digest(w, KEY, SETTINGS)
    return workload_objects.pod("pando-app", "app", w, digest, SETTINGS, pull=False)


def _assert_hardened(spec: dict[str, Any], *, added: tuple[str, ...] = ()) -> None:
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    for container in spec["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["privileged"] is False
        assert context["capabilities"] == {
            "drop": ["ALL"],
            "add": sorted({*DEFAULTS, *added}),
        }


def test_an_app_pod_is_hardened_by_default() -> None:
    pod = _app_pod()
    _assert_hardened(pod["spec"])
    assert pod["spec"]["runtimeClassName"] == "gvisor", "placed as before"
    assert pod["spec"]["automountServiceAccountToken"] is False
    added = pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
    assert "NET_RAW" not in added
    assert "runAsNonRoot" not in pod["spec"]["securityContext"], "root images still run"


def test_the_defaults_are_within_what_the_namespace_admits() -> None:
    assert set(DEFAULTS) == set(security.DEFAULT_CAPABILITIES)
    assert set(security.DEFAULT_CAPABILITIES) <= set(security.GRANTABLE_CAPABILITIES)
    assert set(security.GRANTABLE_CAPABILITIES) == BASELINE_ADDS
    assert "NET_RAW" not in security.GRANTABLE_CAPABILITIES


def test_a_plans_privileges_are_added_to_its_container_and_to_its_digest() -> None:
    asking = Privileges(capabilities=("SYS_CHROOT", "CHOWN"))
    pod = _app_pod(privileges=asking)
    _assert_hardened(pod["spec"], added=("SYS_CHROOT",))
    plain = WorkloadPlan(name="web", image="registry.example/app:1")
    more = WorkloadPlan(name="web", image="registry.example/app:1", privileges=asking)
    assert workload_objects.workload_digest(plain, KEY, SETTINGS) != (
        workload_objects.workload_digest(more, KEY, SETTINGS)
    ), "a changed grant replaces the pod"


def test_every_other_pod_the_adapter_writes_is_hardened_too() -> None:
    network = AppNetwork(KubernetesConfig(egress_gateway_image="registry.example/squid:5"))
    hosts = EgressPolicy(allow=(EgressRule(destination="api.example.com", ports=(443,)),))
    trial = trial_objects(
        TrialRequest(trial_id="t1", image="registry.example/app:1", egress=hosts),
        subject=None,
        role="r",
        observer_image="busybox:1.37",
        settings=SETTINGS,
        wait=10,
        network=network,
    )
    canary = canary_objects("pando-canary-x", image="busybox:1.37", subject=None, role="r")
    helper = helper_pod(
        "pando-app",
        "pando-vol",
        image="busybox:1.37",
        mount_path="/data",
        read_only=False,
        node_name=None,
        placement=SETTINGS,
    )
    edge = edge_objects(
        EdgePlan(name="front", image="registry.example/edge:1"),
        namespace="pando-edge",
        digest="d",
        service_type="ClusterIP",
        placement=SETTINGS,
    )
    specs = [d["spec"] for d in (*trial, *canary, helper) if d["kind"] == "Pod"]
    specs += [d["spec"]["template"]["spec"] for d in edge if d["kind"] == "Deployment"]
    # The trial's pod and its gateway, the canary's server (its clients are made as it
    # runs, by the same builder), the volume helper, the edge.
    assert len(specs) == 5, len(specs)
    for spec in specs:
        _assert_hardened(spec)


@pytest.mark.parametrize("added", [(), ("MKNOD",), ("CHOWN", "AUDIT_WRITE")])
def test_a_container_never_holds_more_than_the_defaults_and_what_was_asked(
    added: tuple[str, ...],
) -> None:
    context = security.container_security(added)
    assert set(context["capabilities"]["add"]) == {*DEFAULTS, *added}
    assert context["capabilities"]["drop"] == ["ALL"]
