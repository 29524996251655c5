"""Sandboxed apps, computed: a sandboxed trial's pod, and a pod stored without the RuntimeClass
it was given (no cluster: the real node shows the rest, ``test_real_node_sandboxed``; which
handlers sandbox is the core's rule, ``tests/test_runtime_sandbox.py``)."""

from __future__ import annotations

import pytest
from pando_runtime_kubernetes._info import KubernetesConfig
from pando_runtime_kubernetes.features._sandbox import SandboxClasses
from pando_runtime_kubernetes.features._trial import OBSERVER, trial_objects
from pando_runtime_kubernetes.manifests._network import AppNetwork
from pando_runtime_kubernetes.manifests._workload_objects import PodSettings
from pando_runtime_kubernetes.session._session import ClusterSession

from pando_runtime import AdapterFailed, IsolationClass, TrialRequest


def test_a_sandboxed_trial_runs_under_the_class_with_no_observer() -> None:
    def pod(settings: PodSettings, *, observe: bool) -> dict[str, object]:
        docs = trial_objects(
            TrialRequest(trial_id="t1", image="registry.example/app:1"),
            subject=None,
            role="r",
            observer_image="busybox:1.37",
            settings=settings,
            wait=10,
            network=AppNetwork(KubernetesConfig()),
            observe=observe,
        )
        return next(d for d in docs if d["kind"] == "Pod")["spec"]

    boxed = pod(PodSettings("gvisor"), observe=False)
    assert boxed["runtimeClassName"] == "gvisor"
    assert [c["name"] for c in boxed["containers"]] == ["app"]
    plain = pod(PodSettings(), observe=True)
    assert "runtimeClassName" not in plain
    assert [c["name"] for c in plain["containers"]] == ["app", OBSERVER]


def test_a_pod_stored_without_its_runtime_class_is_refused_by_name() -> None:
    config = KubernetesConfig(sandbox_runtime_class="gvisor")
    sandbox = SandboxClasses(ClusterSession(config), config)
    # Before the cluster's classes are read nothing is sandboxed: every pod gets runtime_class.
    assert sandbox.isolation() is IsolationClass.CONTAINER
    assert sandbox.pod_settings(IsolationClass.SANDBOXED).runtime_class is None
    asked = PodSettings("gvisor")
    stored = {"metadata": {"name": "web-1"}, "spec": {"runtimeClassName": "gvisor"}}
    sandbox.admitted(stored, asked)  # kept as given: no error
    stripped = {"metadata": {"name": "web-1"}, "spec": {}}
    with pytest.raises(AdapterFailed) as caught:
        sandbox.admitted(stripped, asked)
    assert caught.value.details == {"pod": "web-1", "asked": "gvisor", "stored": None}
    sandbox.admitted(stripped, PodSettings())  # an ordinary pod asked for no class
