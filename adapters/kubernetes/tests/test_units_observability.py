"""Pure logic of what the adapter reports: how calls are named, what the watch loop says."""

# ruff: noqa: ASYNC110
from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import pytest
from _kubeconfigs import kubeconfig_file
from kubernetes.client import Configuration
from observing import otel_sdk
from pando_runtime_kubernetes import KubeTransport
from pando_runtime_kubernetes._multi import MultiClusterAdapter
from pando_runtime_kubernetes.api._http import describe_call
from pando_runtime_kubernetes.cache._stores import PodStore
from pando_runtime_kubernetes.cache._watch import WatchLoop
from test_units import FakeSource, _pod

import pando_runtime as pr

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("method", "path", "query", "named"),
    [
        ("GET", "/version", None, ("get", "version", None)),
        ("GET", "/apis/metrics.k8s.io/v1beta1", None, ("get", "metrics.k8s.io", None)),
        ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "pods", None)),
        ("GET", "/api/v1/namespaces", None, ("list", "namespaces", None)),
        ("GET", "/api/v1/namespaces/pando-a", None, ("get", "namespaces", None)),
        ("DELETE", "/api/v1/namespaces/pando-a", None, ("delete", "namespaces", None)),
        ("GET", "/api/v1/namespaces/pando-a/pods", None, ("list", "pods", "pando-a")),
        ("POST", "/api/v1/namespaces/pando-a/pods", None, ("create", "pods", "pando-a")),
        ("GET", "/api/v1/namespaces/pando-a/pods/web-1/log", {}, ("get", "pods/log", "pando-a")),
        (
            "PATCH",
            "/apis/networking.k8s.io/v1/namespaces/pando-a/networkpolicies/pando-default",
            {"fieldManager": "pando", "force": "true"},
            ("patch", "networkpolicies.networking.k8s.io", "pando-a"),
        ),
        (
            "GET",
            "/apis/metrics.k8s.io/v1beta1/namespaces/pando-a/pods",
            None,
            ("list", "pods.metrics.k8s.io", "pando-a"),
        ),
        ("PUT", "/api/v1/namespaces/pando-a/secrets/s", None, ("update", "secrets", "pando-a")),
    ],
)
def test_calls_are_named_as_the_api_server_names_them(
    method: str, path: str, query: dict[str, str] | None, named: tuple[str, str, str | None]
) -> None:
    assert describe_call(method, path, query) == named


async def test_the_watch_loop_says_why_it_starts_over_and_reports_each_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = FakeSource()
    source.items = [_pod(ready=True), _pod(ready=False)]
    source.scripts = [
        [{"type": "ADDED", "object": _pod(ready=True)}],  # the server ends it: reopened
        [{"type": "ERROR", "object": {"code": 410, "message": "too old: secret-ish text"}}],
        OSError("connection reset"),
    ]
    restarts: list[str] = []
    loop = WatchLoop(
        source,
        PodStore(),
        name="pods",
        backoff_initial=0.001,
        on_restart=restarts.append,
        log_extra={"cluster": "eu-1"},
    )
    caplog.set_level(logging.DEBUG, logger="pando_runtime.kubernetes")
    async with anyio.create_task_group() as group:
        group.start_soon(loop.run)
        with anyio.fail_after(5):
            while len(source.watches) < 4:
                await anyio.sleep(0.01)
        loop.request_relist()
        with anyio.fail_after(5):
            while source.lists < 3:
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    assert restarts[:3] == ["gone", "error", "requested"]
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.endswith(".watch")]
    assert ("DEBUG", "listed pods: objects: 2") in said
    assert ("INFO", "the pods watch's version is too old (410): relisting") in said
    relists = [r for r in caplog.records if r.getMessage().startswith("relisted pods")]
    assert [r.levelname for r in relists[:2]] == ["INFO", "INFO"]
    assert [r.reason for r in relists[:2]] == ["gone", "requested"]  # type: ignore[attr-defined]
    failed = next(r for r in caplog.records if r.levelname == "WARNING")
    assert failed.getMessage().startswith("the pods watch failed (OSError): retrying in")
    assert failed.cluster == "eu-1"  # type: ignore[attr-defined]
    assert all("secret-ish" not in r.getMessage() for r in caplog.records), "no server text"


class Calls:
    """An observer that keeps what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def call(self, verb: str, resource: str, status: int, seconds: float) -> None:
        self.calls.append((verb, resource, status))

    def watch_restarted(self, resource: str, reason: str) -> None:
        pass

    def track(self, source: pr.plugin.ApiStateSource) -> None:
        pass

    def bind(self, **attributes: str) -> pr.plugin.ApiObserver:
        return self


def test_a_throttled_failed_or_unanswered_call_is_a_warning_others_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    configuration = Configuration(host="https://127.0.0.1:6443")
    transport = KubeTransport(configuration, cluster="eu-1")
    observer = Calls()
    transport.observer = observer
    caplog.set_level(logging.DEBUG, logger="pando_runtime.kubernetes.transport")
    call = ("patch", "secrets", "pando-shop")
    started = time.perf_counter()
    try:
        for status, retry_after in ((200, None), (429, 2.0), (503, None), (0, None), (404, None)):
            transport._observed(call, started, status, retry_after)
    finally:
        transport.close()
    assert [s for _, _, s in observer.calls] == [200, 429, 503, 0, 404]
    said = [(r.levelname, r.getMessage().split(":")[-1].strip()) for r in caplog.records]
    assert [level for level, _ in said] == ["DEBUG", "WARNING", "WARNING", "WARNING", "DEBUG"]
    throttled = caplog.records[1]
    assert throttled.getMessage().startswith("the API server throttled patch secrets in pando-shop")
    assert "retry after 2 s" in throttled.getMessage()
    assert (throttled.cluster, throttled.status, throttled.retry_after) == ("eu-1", 429, 2.0)  # type: ignore[attr-defined]
    assert "no answer" in caplog.records[3].getMessage()


async def test_each_member_of_a_multi_cluster_adapter_reports_naming_its_cluster(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = kubeconfig_file(tmp_path / "kubeconfig", "east", "west", current="west")
    caplog.set_level(logging.WARNING, logger="pando_runtime.kubernetes")
    with otel_sdk() as otel:
        runtime = otel.instrument(MultiClusterAdapter({"kubeconfig": str(config)}))
        with pytest.raises(pr.AdapterUnavailable):
            await runtime.capacity()  # nothing listens on those ports
        await runtime.aclose()
        calls = {
            (p.attributes["pando.cluster"], p.attributes["http.response.status_code"])
            for p in otel.points("pando_runtime.api.calls")
        }
    assert ("west", 0) in calls, "the default member's call, which nothing answered"
    # The members are asked at once (the fleet's way): each record names the member it is of.
    unanswered = [r for r in caplog.records if r.name.endswith(".transport")]
    assert "west" in {r.cluster for r in unanswered}  # type: ignore[attr-defined]
    assert {r.cluster for r in unanswered} <= {"west", "east"}  # type: ignore[attr-defined]
    assert all("no answer" in r.getMessage() for r in unanswered)
