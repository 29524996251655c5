"""Pure logic of the adapter: names, digests, objects, token bucket, capacity, watch loop."""

# ruff: noqa: ASYNC110, FBT003
from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from pando_runtime_kubernetes._names import namespace_for, pod_name
from pando_runtime_kubernetes.api._ratelimit import TokenBucket
from pando_runtime_kubernetes.cache._capacity import (
    cpu_millis,
    eligible,
    memory_bytes,
    node_rooms,
    pod_requests,
    pod_reservation,
)
from pando_runtime_kubernetes.cache._informer import Informer
from pando_runtime_kubernetes.cache._projections import pod_transitions, project_pod
from pando_runtime_kubernetes.cache._stores import PodStore, ServiceStore
from pando_runtime_kubernetes.cache._watch import Gone, WatchLoop
from pando_runtime_kubernetes.cache._work_queue import WorkQueue
from pando_runtime_kubernetes.features._usage import APP_PODS_SELECTOR, pod_usage, workload_usages
from pando_runtime_kubernetes.manifests import _namespace_objects as ns_objects
from pando_runtime_kubernetes.manifests import _workload_objects as workload_objects

from pando_runtime import (
    BundleEventKind,
    BundlePlan,
    BundleRef,
    CapabilityUnsupported,
    CarriedFile,
    HealthCheck,
    Port,
    RegistryAuth,
    Resources,
    WorkloadPlan,
    WorkloadProblem,
    available_adapters,
)

pytestmark = pytest.mark.anyio
KEY = b"k" * 32
SETTINGS = workload_objects.PodSettings()


def test_listing_adapters_does_not_import_the_client() -> None:
    sys.modules.pop("kubernetes", None)
    names = [a.name for a in available_adapters()]
    assert "kubernetes" in names
    assert "kubernetes" not in sys.modules


def test_namespace_names() -> None:
    assert namespace_for("app_01HQ8ABC") == "pando-app-01hq8abc"
    assert namespace_for("A-b_c") == "pando-a-b-c"
    name = pod_name("web", "d1", None)
    assert name.startswith("web-")
    assert len(name) == 12


def test_pod_names_follow_the_plan_and_the_instance_replaced() -> None:
    first = pod_name("web", "d1", None)
    assert first == pod_name("web", "d1", None), "two writers of one state choose one name"
    assert first != pod_name("web", "d2", None), "a changed plan is a new pod"
    assert first != pod_name("web", "d1", "uid-1"), "a restart of an ended pod is a new pod"
    assert pod_name("web", "d1", "uid-1") != pod_name("web", "d1", "uid-2")
    assert first != pod_name("api", "d1", None)
    assert len(pod_name("w" * 63, "d1", None)) == 63


def _workload(**fields: Any) -> WorkloadPlan:
    fields.setdefault("image", "registry.example/app:1")
    return WorkloadPlan(name="web", **fields)


def test_digest_changes_with_what_runs_and_hides_env() -> None:
    base = workload_objects.workload_digest(_workload(env={"A": "1"}), KEY, SETTINGS)
    assert base == workload_objects.workload_digest(_workload(env={"A": "1"}), KEY, SETTINGS)
    assert base != workload_objects.workload_digest(_workload(env={"A": "2"}), KEY, SETTINGS)
    assert base != workload_objects.workload_digest(_workload(env={"A": "1"}), b"x" * 32, SETTINGS)
    assert base != workload_objects.workload_digest(
        _workload(env={"A": "1"}, image="r.example/b:2"), KEY, SETTINGS
    )
    assert base != workload_objects.workload_digest(
        _workload(env={"A": "1"}), KEY, workload_objects.PodSettings("gvisor")
    )


def test_pod_is_bare_private_and_limited() -> None:
    w = _workload(
        env={"SECRET": "hunter2"},
        ports=(Port(8080),),
        command=("serve",),
        entrypoint=("/bin/app",),
        health=HealthCheck(command=("true",)),
        resources=Resources(cpu_millis=250, memory_bytes=1024),
        files=(CarriedFile("/etc/x", b"1", 0o600),),
    )
    body = workload_objects.pod(
        "pando-a",
        "a",
        w,
        "d1",
        workload_objects.PodSettings("kata", {"pool": "apps"}),
        pull=True,
        created_ns=7,
    )
    spec = body["spec"]
    container = spec["containers"][0]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["runtimeClassName"] == "kata"
    assert spec["nodeSelector"] == {"pool": "apps"}
    assert spec["imagePullSecrets"] == [{"name": "pando-pull"}]
    assert container["command"] == ["/bin/app"]
    assert container["args"] == ["serve"]
    assert (
        container["resources"]["requests"]
        == container["resources"]["limits"]
        == {"cpu": "250m", "memory": "1024"}
    )
    assert "livenessProbe" not in container
    assert container["readinessProbe"]["exec"] == {"command": ["true"]}
    assert "hostPort" not in container["ports"][0]
    assert "hunter2" not in repr(body)
    assert body["metadata"]["annotations"]["pando.dev/created"] == "7"
    assert container["volumeMounts"][0]["subPath"] == "f0"


def test_namespace_objects() -> None:
    plan = BundlePlan(bundle_id="App1", workloads=(_workload(),))
    body = ns_objects.namespace("pando-app1", plan)
    assert body["metadata"]["annotations"]["pando.dev/bundle-id"] == "App1"
    found = ns_objects.namespace_objects(
        "pando-app1",
        plan,
        subject="User:alice",
        role="pando-runtime-app",
    )
    kinds = ["RoleBinding", "ServiceAccount", "NetworkPolicy", "ResourceQuota"]
    assert [o["kind"] for o in found] == kinds
    assert found[1]["metadata"]["name"] == "default"
    assert found[1]["automountServiceAccountToken"] is False
    assert found[3]["spec"]["hard"] == {"services.nodeports": "0", "services.loadbalancers": "0"}
    one = ns_objects.namespace_digest(body, found)
    assert one == ns_objects.namespace_digest(body, found)
    svc = workload_objects.service("pando-app1", "App1", _workload(ports=(Port(53),)))
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["type"] == "ClusterIP"


async def test_token_bucket_burst_then_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=10, burst=2, clock=lambda: now[0])
    assert bucket.try_acquire() == 0.0
    assert bucket.try_acquire() == 0.0
    assert bucket.try_acquire() == pytest.approx(0.1)
    now[0] += 0.1
    assert bucket.try_acquire() == 0.0
    real = TokenBucket(rate=100, burst=1)
    start = anyio.current_time()
    for _ in range(3):
        await real.acquire()
    assert anyio.current_time() - start >= 0.015


def test_quantities_and_capacity() -> None:
    assert cpu_millis("250m") == 250
    assert cpu_millis("1.5") == 1500
    assert memory_bytes("8Gi") == 8 * 2**30
    assert memory_bytes("1e3") == 1000

    def node(name: str, **extra: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": extra.pop("labels", {})},
            "spec": extra.pop("spec", {}),
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi"},
                "conditions": [{"type": "Ready", "status": extra.pop("ready", "True")}],
            },
        }

    def pod(node_name: str, ns: str, cpu: str, pando: bool = True) -> dict[str, Any]:
        labels = {"app.kubernetes.io/managed-by": "pando"} if pando else {}
        return {
            "metadata": {"namespace": ns, "labels": labels},
            "spec": {
                "nodeName": node_name,
                "containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            },
            "status": {"phase": "Running"},
        }

    nodes = [
        node("a"),
        node("b"),
        node("tainted", spec={"taints": [{"effect": "NoSchedule"}]}),
        node("down", ready="False"),
        node("cordoned", spec={"unschedulable": True}),
    ]
    assert [n["metadata"]["name"] for n in nodes if eligible(n, {})] == ["a", "b"]
    assert not eligible(node("a"), {"pool": "x"})
    assert pod_requests(pod("a", "x", "500m")) == (500, 2**30)
    finished = pod("a", "pando-x", "2")
    finished["status"]["phase"] = "Succeeded"
    pending = pod("a", "pando-x", "2")
    del pending["spec"]["nodeName"]
    assert pod_reservation(finished) is None
    assert pod_reservation(pending) is None
    pods = [
        pod("a", "pando-x", "1"),
        pod("b", "kube-system", "3", False),
        pod("a", "pando-y", "1"),
        finished,
        pending,
    ]
    rooms = node_rooms(nodes, [r for r in map(pod_reservation, pods) if r], {})
    by_name = {r.name: r for r in rooms}
    assert by_name["a"].free() == (2000, 6 * 2**30)
    assert by_name["a"].free("pando-x") == (3000, 7 * 2**30)
    assert by_name["b"].free() == (1000, 7 * 2**30)


def _pod(phase: str = "Running", **state: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [
            {
                "name": "web",
                "ready": state.pop("ready", False),
                "state": state or {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            }
        ],
    }
    return {
        "metadata": {
            "name": "web-abcde",
            "namespace": "pando-a",
            "uid": "u1",
            "resourceVersion": "5",
            "labels": {"pando.dev/workload": "web", "pando.dev/bundle": "a"},
            "annotations": {"pando.dev/bundle-id": "A", "pando.dev/created": "9"},
        },
        "spec": {
            "containers": [{"name": "web", "readinessProbe": {"exec": {"command": ["true"]}}}]
        },
        "status": status,
    }


def test_pod_projection_and_transitions() -> None:
    at = datetime.now(UTC)
    pending = project_pod(_pod("Pending", waiting={}))
    running = project_pod(_pod(ready=True))
    ended = project_pod(_pod("Failed", terminated={"exitCode": 3, "reason": "Error"}))
    oom = project_pod(_pod("Failed", terminated={"exitCode": 137, "reason": "OOMKilled"}))
    assert running is not None
    assert running.running
    assert running.ready is True
    assert running.bundle_id == "A"
    assert running.created == 9
    kinds = [e.kind for e in pod_transitions(pending, running, at)]
    assert kinds == [BundleEventKind.STARTED, BundleEventKind.HEALTH_CHANGED]
    exited = pod_transitions(running, ended, at)
    assert [(e.kind, e.exit_code) for e in exited] == [(BundleEventKind.EXITED, 3)]
    assert pod_transitions(ended, ended, at) == []
    assert [e.kind for e in pod_transitions(running, oom, at)] == [BundleEventKind.OOM_KILLED]
    assert [e.kind for e in pod_transitions(running, None, at)] == [BundleEventKind.REMOVED]


def test_a_stuck_pod_is_observed_with_its_problem() -> None:
    from pando_runtime_kubernetes.features._bundles import observed_workload  # noqa: PLC0415

    message = 'failed to pull image "127.0.0.1:5000/app:1": 401 Unauthorized'
    pull = project_pod(_pod("Pending", waiting={"reason": "ErrImagePull", "message": message}))
    backoff = project_pod(_pod("Pending", waiting={"reason": "ImagePullBackOff"}))
    config = project_pod(_pod("Pending", waiting={"reason": "CreateContainerConfigError"}))
    creating = project_pod(_pod("Pending", waiting={"reason": "ContainerCreating"}))
    running = project_pod(_pod(ready=True))
    for facts in (pull, backoff, config, creating, running):
        assert facts is not None
    assert pull is not None
    stuck = observed_workload("web", pull)
    assert (stuck.problem, stuck.problem_detail) == (WorkloadProblem.IMAGE_PULL, message)
    assert (stuck.present, stuck.running, stuck.exit_code) == (True, False, None)
    assert observed_workload("web", backoff).problem is WorkloadProblem.IMAGE_PULL
    assert observed_workload("web", config).problem is WorkloadProblem.CANNOT_START
    assert observed_workload("web", creating).problem is None  # may still start
    assert observed_workload("web", running).problem is None
    unschedulable = _pod("Pending", waiting={})
    unschedulable["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "full"}
    ]
    facts = project_pod(unschedulable)
    assert facts is not None
    observed = observed_workload("web", facts)
    assert (observed.problem, observed.problem_detail) == (WorkloadProblem.UNSCHEDULABLE, "full")


def test_a_pod_on_a_silent_node_is_lost_deleted_or_not() -> None:
    from pando_runtime_kubernetes.features._bundles import observed_workload  # noqa: PLC0415

    doc = _pod(ready=False)
    doc["status"]["conditions"] = [
        {"type": "Ready", "status": "False"},  # the node lifecycle controller's mark
        {"type": "ContainersReady", "status": "True"},
    ]
    facts = project_pod(doc)
    assert facts is not None
    assert facts.node_lost
    observed = observed_workload("web", facts)
    assert (observed.lost, observed.running, observed.stopping) == (True, False, False)
    # Deleted (replaced by a re-apply, or its app destroyed): still lost, never "stopping"
    # and "running", which nothing on a silent node can confirm.
    doc["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    deleted = project_pod(doc)
    assert deleted is not None
    assert deleted.node_lost
    assert deleted.stopping
    for leaving in (False, True):
        observed = observed_workload("web", deleted, leaving=leaving)
        assert (observed.lost, observed.running, observed.stopping) == (True, False, False)


def test_a_deleted_pod_whose_container_runs_is_observed_running_and_stopping() -> None:
    from pando_runtime_kubernetes.features._bundles import observed_workload  # noqa: PLC0415

    deleted = _pod(ready=True)
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    stopping = project_pod(deleted)
    assert stopping is not None
    assert stopping.stopping
    assert not stopping.running  # not counted as a live instance by apply
    observed = observed_workload("web", stopping)
    assert (observed.present, observed.running, observed.stopping) == (True, True, True)
    ended = _pod("Failed", terminated={"exitCode": 143, "reason": "Error"})
    ended["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    gone = project_pod(ended)
    assert gone is not None
    assert not gone.stopping
    observed = observed_workload("web", gone)
    assert (observed.running, observed.stopping, observed.exit_code) == (False, False, 143)
    never_started = _pod("Pending", waiting={})
    never_started["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    pending = project_pod(never_started)
    assert pending is not None
    assert not pending.stopping
    running = project_pod(_pod(ready=True))
    assert running is not None
    assert observed_workload("web", running).stopping is False
    # The app destroyed (its namespace being deleted): a pod not yet deleted is stopping too.
    leaving = observed_workload("web", running, leaving=True)
    assert (leaving.running, leaving.stopping) == (True, True)


@pytest.mark.parametrize(
    "message",
    [
        '0/3 nodes are available: persistentvolumeclaim "pando-vol-v1" not found.',
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
    ],
)
def test_a_pod_waiting_only_for_its_claims_is_pending_not_refused(message: str) -> None:
    # The scheduler retries by itself once it sees the claim (created just before the pod).
    from pando_runtime_kubernetes.features._bundles import observed_workload  # noqa: PLC0415

    pod = _pod("Pending", waiting={})
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    facts = project_pod(pod)
    assert facts is not None
    assert facts.unschedulable is None
    assert observed_workload("web", facts).problem is None


class FakeSource:
    """A list/watch source scripted by the test (the API is not faked, its source is)."""

    def __init__(self) -> None:
        self.lists = 0
        self.watches: list[str] = []
        self.items: list[dict[str, Any]] = []
        self.scripts: list[list[dict[str, Any]] | Exception] = []

    async def list(self, project: Any) -> tuple[list[Any], str]:
        self.lists += 1
        return [kept for item in self.items if (kept := project(item)) is not None], "10"

    @asynccontextmanager
    async def watch(self, resource_version: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        self.watches.append(resource_version)
        script = self.scripts.pop(0) if self.scripts else []
        if isinstance(script, Exception):
            raise script

        async def events() -> AsyncIterator[dict[str, Any]]:
            for event in script:
                yield event
            if not self.scripts:
                await anyio.sleep_forever()

        yield events()


async def test_watch_loop_reopens_relists_and_backs_off() -> None:
    source = FakeSource()
    store = PodStore()
    running = _pod(ready=True)
    source.scripts = [
        [
            {"type": "ADDED", "object": running},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
        ],  # ends
        [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
        OSError("connection reset"),  # backed off, then reopened
    ]
    loop = WatchLoop(source, store, backoff_initial=0.001)
    kinds: list[BundleEventKind] = []
    async with store.events.subscribe() as stream:
        async with anyio.create_task_group() as group:
            group.start_soon(loop.run)
            with anyio.fail_after(5):
                while source.lists < 2 or len(source.watches) < 4:
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()
        store.events.close()  # what was published is buffered: read it to the end
        kinds.extend([event.kind async for event in stream])
    # first watch from the list's version, reopened from the bookmark's, then relist on 410
    assert source.watches[:2] == ["10", "20"]
    assert source.lists >= 2
    assert kinds[0] == BundleEventKind.STARTED
    assert BundleEventKind.MISSED in kinds, "a relist tells subscribers they may have missed"


async def test_work_queue_dedups_and_retries() -> None:
    queue: WorkQueue[str] = WorkQueue(max_retries=2, backoff_initial=0.001)
    seen: list[str] = []
    fail = {"b": 2}

    async def process(key: str) -> None:
        seen.append(key)
        if fail.get(key):
            fail[key] -= 1
            raise RuntimeError(key)

    queue.add("a")
    queue.add("a")
    queue.add("b")
    async with anyio.create_task_group() as group:
        group.start_soon(queue.run, process)
        with anyio.fail_after(5):
            while seen.count("b") < 3:
                await anyio.sleep(0.005)
        group.cancel_scope.cancel()
    assert seen.count("a") == 1
    assert seen.count("b") == 3
    assert queue.dropped == 0


def test_gone_is_an_exception() -> None:
    assert issubclass(Gone, Exception)


def test_usage_of_a_pod_metrics_item_sums_containers_and_rounds_cpu() -> None:
    item = {
        "metadata": {"name": "web-abcde"},
        "containers": [
            {"name": "web", "usage": {"cpu": "249958825n", "memory": "300Mi"}},
            {"name": "side", "usage": {"cpu": "1500u", "memory": "1024Ki"}},
        ],
    }
    assert pod_usage(item) == (250 + 2, 301 * 2**20)
    assert pod_usage({"containers": []}) == (0, 0)


def test_workload_usage_running_sampled_unsampled_and_ended() -> None:
    spec = _pod(ready=True)
    spec["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "500m", "memory": "256Mi"}}
    running = project_pod(spec)
    ended = project_pod(_pod("Failed", terminated={"exitCode": 3, "reason": "Error"}))
    assert running is not None
    assert ended is not None
    assert running.limits == (500, 256 * 2**20)
    assert ended.limits == (None, None), "no limits: unlimited"
    again = project_pod(spec)
    assert again is not None
    assert again.limits is running.limits, "pods of one size share their limits"

    sampled = {"web-abcde": (120, 200 * 2**20)}
    web, gone, idle = workload_usages([("web", running), ("gone", None), ("idle", ended)], sampled)
    assert (web.running, web.cpu_millis, web.memory_bytes) == (True, 120, 200 * 2**20)
    assert (web.cpu_limit_millis, web.memory_limit_bytes) == (500, 256 * 2**20)
    assert (gone.running, gone.cpu_millis, gone.memory_bytes) == (False, 0, 0)
    assert (idle.running, idle.cpu_millis) == (False, 0)
    (unsampled,) = workload_usages([("web", running)], {})
    assert (unsampled.cpu_millis, unsampled.memory_bytes) == (-1, -1), "running, not measured"


def test_app_pods_selector_leaves_out_helpers_and_foreign_pods() -> None:
    terms = APP_PODS_SELECTOR.split(",")
    assert "app.kubernetes.io/managed-by=pando" in terms
    assert "pando.dev/workload" in terms
    assert "!pando.dev/role" in terms


async def test_capabilities_are_data_even_without_a_cluster(tmp_path: Any) -> None:
    from pando_runtime_kubernetes import KubernetesAdapter  # noqa: PLC0415

    adapter = KubernetesAdapter({"kubeconfig": str(tmp_path / "absent.kubeconfig")})
    capabilities = await adapter.capabilities()
    assert not capabilities.reports_usage, "unknown until the metrics API answers"
    assert capabilities.exec
    with pytest.raises(CapabilityUnsupported):
        await adapter.usage(BundleRef("any"))


def test_observed_memo_is_forgotten_by_every_change_of_its_namespace() -> None:
    informer = Informer(None, sources={}, kinds=())
    memo = informer.observed
    since = memo.changes
    memo.keep("pando-a", "answer", since)
    memo.keep("pando-b", "other", since)
    assert memo.get("pando-a") == "answer"
    informer.pods.on_event("ADDED", _pod())  # a pod of pando-a
    assert memo.get("pando-a") is None
    assert memo.get("pando-b") == "other", "other namespaces keep theirs"
    memo.keep("pando-a", "stale", since)
    assert memo.get("pando-a") is None, "an answer built across a change is not kept"
    since = memo.changes
    memo.keep("pando-a", "answer", since)
    informer.pods.remove("pando-a", "web-abcde")
    assert memo.get("pando-a") is None
    namespace = {"metadata": {"name": "pando-b", "annotations": {"pando.dev/bundle-id": "B"}}}
    informer.namespaces.on_event("MODIFIED", namespace)
    assert memo.get("pando-b") is None
    since = memo.changes
    memo.keep("pando-b", "answer", since)
    informer.namespaces.terminating(informer.namespaces.by_name["pando-b"])
    assert memo.get("pando-b") is None, "a namespace being deleted is observed afresh"
    assert informer.namespaces.by_name["pando-b"].terminating
    memo.keep("pando-a", "answer", memo.changes)
    memo.keep("pando-b", "answer", memo.changes)
    claim = {
        "metadata": {
            "name": "c",
            "namespace": "pando-a",
            "annotations": {"pando.dev/volume-id": "v"},
        }
    }
    informer.claims.on_event("ADDED", claim)
    assert memo.get("pando-a") is None
    assert memo.get("pando-b") == "answer"
    informer.namespaces.on_list([], relist=True)
    assert memo.get("pando-b") is None, "a list forgets everything"


def test_the_service_store_keeps_each_namespaces_names_once() -> None:
    store = ServiceStore()

    def service(ns: str, name: str) -> dict[str, Any]:
        return {"metadata": {"namespace": ns, "name": name}}

    store.on_list([ServiceStore.project(service("a", "web")), ("a", "web"), ("b", "db")], False)
    assert store.names("a") == ("web",)
    store.on_event("ADDED", service("a", "api"))
    store.on_event("MODIFIED", service("a", "api"))
    assert store.names("a") == ("web", "api")
    store.on_event("DELETED", service("a", "web"))
    store.on_event("DELETED", service("b", "db"))
    assert store.names("a") == ("api",)
    assert store.names("b") == ()
    assert "b" not in store.by_namespace


@pytest.mark.anyio
async def test_confirmation_without_a_new_proof_is_the_same_instant() -> None:
    class Unused:
        """A source the test never runs: the watch's last proof stays where it is."""

    informer = Informer(None, sources={"pods": Unused()}, kinds=("pods",))  # type: ignore[dict-item]
    informer.loops["pods"].alive_at = anyio.current_time()
    answers = set()
    for _ in range(50):
        answers.add(informer.staleness.confirmed_at())
        await anyio.lowlevel.checkpoint()
    assert len(answers) == 1, "never earlier, never later, until the cache is proved again"
    await anyio.sleep(0.01)
    informer.loops["pods"].alive_at = anyio.current_time()  # proved again
    assert informer.staleness.confirmed_at() > answers.pop()


def test_a_connection_cut_while_a_body_is_read_is_a_coded_api_error() -> None:
    # The official client opens responses without reading them: the body is read later, and a
    # connection reset there must come out as the transport's own error, like any other cut.
    import urllib3  # noqa: PLC0415
    from pando_runtime_kubernetes import ApiError  # noqa: PLC0415
    from pando_runtime_kubernetes.api._http import read_body  # noqa: PLC0415

    class CutResponse:
        @property
        def data(self) -> bytes:
            raise urllib3.exceptions.ProtocolError("Connection broken: reset by peer")

    with pytest.raises(ApiError) as caught:
        read_body(CutResponse())  # type: ignore[arg-type]
    assert caught.value.status == 0
    assert "reset by peer" in caught.value.message


def test_one_registry_takes_one_credential_per_app() -> None:
    first = RegistryAuth(registry="r.example", username="a", password="x")  # noqa: S106
    same = RegistryAuth(registry="r.example", username="a", password="x")  # noqa: S106
    other = RegistryAuth(registry="r.example", username="b", password="y")  # noqa: S106
    elsewhere = RegistryAuth(registry="q.example", username="b", password="y")  # noqa: S106
    workloads = [
        WorkloadPlan(name=f"w{i}", image="r.example/app:1", pull_auth=auth)
        for i, auth in enumerate((first, same, None, elsewhere, other))
    ]
    problems = ns_objects.pull_auth_conflicts(workloads)
    assert [(p.path, p.code) for p in problems] == [("workloads[4].pull_auth", "conflict")]
    assert "workloads[0]" in problems[0].message
    assert "y" not in problems[0].message.split()  # never a password


def test_a_pod_whose_node_went_silent_is_observed_lost() -> None:
    from pando_runtime_kubernetes.features._bundles import observed_workload  # noqa: PLC0415

    def with_conditions(ready: str, containers_ready: str, **kwargs: Any) -> Any:
        pod = _pod(ready=True, **kwargs)
        pod["status"]["conditions"] = [
            {"type": "Ready", "status": ready},
            {"type": "ContainersReady", "status": containers_ready},
        ]
        return project_pod(pod)

    # The node lifecycle controller's mark: Ready False, the kubelet's ContainersReady True.
    marked = observed_workload("web", with_conditions("False", "True"))
    assert (marked.lost, marked.running, marked.present) == (True, False, True)
    assert marked.instance_id == "u1"
    # The kubelet's own "not ready" (a failing probe) is no lost node.
    probe = observed_workload("web", with_conditions("False", "False"))
    assert (probe.lost, probe.running) == (False, True)
    assert observed_workload("web", with_conditions("True", "True")).lost is False
    ended = with_conditions("False", "True", phase="Failed", terminated={"exitCode": 1})
    assert observed_workload("web", ended).lost is False  # an end is known, not lost


def test_the_replacement_of_a_lost_pod_keeps_off_its_node() -> None:
    settings = workload_objects.PodSettings("kata", {"pool": "apps"})
    away = workload_objects.pod("pando-a", "a", _workload(), "d1", settings, pull=False,
                                avoid_node="node-7")  # fmt: skip
    terms = away["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-7"]}]}
    ]
    assert away["spec"]["nodeSelector"] == {"pool": "apps"}  # the settings' place still holds
    plain = workload_objects.pod("pando-a", "a", _workload(), "d1", settings, pull=False)
    assert "affinity" not in plain["spec"]
