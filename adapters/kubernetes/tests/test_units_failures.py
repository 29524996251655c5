"""Failures that must reach someone: logged, raised or reported, never swallowed (issue 22).

The superseded-pod collector's give-up, the cache probe's failures, an unreadable trial log,
an adapter whose start fails or is cancelled, and kubeconfig files the multi-cluster adapter
cannot use. No server: the cache runs on scripted sources, the session on stubs.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
import yaml
from _kubeconfigs import kubeconfig_file
from pando_runtime_kubernetes._adapter import KubernetesAdapter
from pando_runtime_kubernetes._info import KubernetesConfig
from pando_runtime_kubernetes._multi import MultiClusterAdapter
from pando_runtime_kubernetes.api._errors import ApiError
from pando_runtime_kubernetes.cache._informer import Informer
from pando_runtime_kubernetes.cache._projections import project_pod
from pando_runtime_kubernetes.features._bundles import Bundles
from pando_runtime_kubernetes.features._sandbox import SandboxClasses
from pando_runtime_kubernetes.features._trial import Trials
from pando_runtime_kubernetes.session._cluster_cache import ClusterCache
from pando_runtime_kubernetes.session._session import ClusterSession

from pando_runtime import AdapterFailed, AdapterUnavailable, RateLimited, TrialRequest

pytestmark = pytest.mark.anyio

SERVER_TEXT = "value-quoted-by-the-server"


class QuietSource:
    """A list/watch source that lists nothing and then watches quietly."""

    async def list(self, project: Any) -> tuple[list[Any], str]:
        return [], "1"

    @asynccontextmanager
    async def watch(
        self, resource_version: str, timeout_seconds: int | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        async def events() -> AsyncIterator[dict[str, Any]]:
            await anyio.sleep_forever()
            yield {}  # pragma: no cover - never reached

        yield events()


def _pod(name: str, *, created: int, ended: bool) -> Any:
    state = {"terminated": {"exitCode": 0}} if ended else {"running": {"startedAt": "x"}}
    facts = project_pod(
        {
            "metadata": {
                "namespace": "app-a",
                "name": name,
                "uid": f"u-{name}",
                "resourceVersion": str(created),
                "labels": {"pando.dev/workload": "web"},
                "annotations": {"pando.dev/created": str(created), "pando.dev/plan-digest": name},
            },
            "spec": {"containers": [{"name": "web"}]},
            "status": {
                "phase": "Succeeded" if ended else "Running",
                "containerStatuses": [{"name": "web", "state": state}],
            },
        }
    )
    assert facts is not None
    return facts


def _records(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == level and text in r.getMessage()]


# -- 1. the superseded-pod collector ---------------------------------------------------------


async def test_a_superseded_pod_that_cannot_be_deleted_is_logged_when_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="pando_runtime.kubernetes")
    tries: list[str] = []

    async def delete(ns: str, plural: str, name: str) -> None:
        tries.append(name)
        raise AdapterFailed(f"cannot delete pods/{name}: {SERVER_TEXT}", details={"status": 500})

    cache = SimpleNamespace(informer=None)
    session = SimpleNamespace(
        writer=SimpleNamespace(delete=delete),
        connection=SimpleNamespace(log_name="c1"),
        cache=cache,
    )
    stub = SimpleNamespace(_session=session)
    collect: Callable[[tuple[str, str]], Awaitable[None]] = functools.partial(
        Bundles.collect_superseded,
        stub,  # type: ignore[arg-type]
    )
    informer = Informer(None, sources={"pods": QuietSource()}, kinds=("pods",), collect=collect)
    cache.informer = informer
    async with informer.running():
        with anyio.fail_after(5):
            await informer.loops["pods"].synced.wait()
        informer.pods.put(_pod("web-old", created=1, ended=True))
        informer.pods.put(_pod("web-new", created=2, ended=False))
        with anyio.move_on_after(6):
            while not _records(caplog, logging.WARNING, "web-old"):  # noqa: ASYNC110 - a log
                await anyio.sleep(0.05)
    assert len(tries) > informer.collector.queue.max_retries, "retried, then given up"
    warnings = _records(caplog, logging.WARNING, "web-old")
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    record = warnings[0]
    assert "app-a" in record.getMessage()
    assert "status 500" in record.getMessage()
    assert getattr(record, "namespace", None) == "app-a"
    assert getattr(record, "pod", None) == "web-old"
    assert all(SERVER_TEXT not in r.getMessage() for r in caplog.records)


# -- 2. the cache probe ----------------------------------------------------------------------


async def test_a_failing_probe_says_why_once_then_when_it_answers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="pando_runtime.kubernetes")
    failing = True
    probes = 0

    async def probe(bound: float) -> None:
        nonlocal probes
        probes += 1
        if failing:
            raise ApiError(0, f"ConnectionRefusedError: {SERVER_TEXT}")

    informer = Informer(
        None, sources={"pods": QuietSource()}, kinds=("pods",), probe=probe, probe_interval=0.02
    )
    async with informer.running():
        with anyio.fail_after(5):
            while probes < 10:  # noqa: ASYNC110 - no event says so
                await anyio.sleep(0.02)
        assert not informer.liveness.reachable
        failing = False
        with anyio.fail_after(5):
            while not informer.liveness.reachable:  # noqa: ASYNC110 - no event says so
                await anyio.sleep(0.02)
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "probe" in r.getMessage()
    ]
    assert len(warnings) == 1, "said once, not at every failed probe"
    assert "no answer" in warnings[0].getMessage()
    assert _records(caplog, logging.INFO, "answers"), "its return is said too"
    assert all(SERVER_TEXT not in r.getMessage() for r in caplog.records)


async def test_any_answer_after_a_failed_probe_shows_the_api_server_reachable() -> None:
    # Killed mid-apply and back: the probe failed during the outage, the next one is seconds
    # away, and the watches have not caught up yet. The writes it answers meanwhile prove it
    # there; the cache must not refuse with "the API server does not answer".
    answered = 0

    async def probe(bound: float) -> None:
        raise ApiError(0, "ConnectionRefusedError: down")

    informer = Informer(
        None,
        sources={"pods": QuietSource()},
        kinds=("pods",),
        probe=probe,
        probe_interval=0.02,
        max_staleness=0.1,
        answers=lambda: answered,
    )
    async with informer.running():
        with anyio.fail_after(5):
            await informer.loops["pods"].synced.wait()
            staleness, liveness = informer.staleness, informer.liveness
            while liveness.reachable or staleness.unconfirmed_for() <= staleness.max_staleness:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        refused = informer.staleness.stale_error()
        assert refused is not None
        assert "does not answer" in refused.message
        answered += 1  # a write the server answered (any status: it is there)
        assert informer.liveness.reachable
        assert informer.staleness.stale_error() is None, "read the API directly instead"
        with anyio.fail_after(5):  # the next failed probe counts from its own moment
            while informer.liveness.reachable:  # noqa: ASYNC110 - no event says so
                await anyio.sleep(0.02)
        assert informer.staleness.stale_error() is not None


async def test_a_probe_failing_for_another_reason_than_no_answer_is_not_swallowed() -> None:
    async def probe(bound: float) -> None:
        raise TypeError("a bug in the probe")

    informer = Informer(
        None, sources={"pods": QuietSource()}, kinds=("pods",), probe=probe, probe_interval=0.02
    )
    raised: list[BaseException] = []
    try:
        with anyio.fail_after(5):
            async with informer.running():
                await anyio.sleep(1)
    except* TypeError as group:
        raised += group.exceptions
    assert raised, "a bug is not taken for an API server that does not answer"
    assert informer.liveness.reachable


# -- 3. the trial's log ----------------------------------------------------------------------


async def test_a_trial_log_that_cannot_be_read_is_an_error_not_an_empty_log() -> None:
    session = ClusterSession(KubernetesConfig())
    exited = {"status": {"containerStatuses": [{"name": "app", "state": {"terminated": {}}}]}}
    exited["status"]["containerStatuses"][0]["state"]["terminated"] = {"exitCode": 3}

    async def get(path: str, what: str, **query: Any) -> dict[str, Any]:
        return exited

    async def read_log(ns: str, pod: str, container: str, limit: int) -> bytes:
        error = ApiError(500, "Internal Server Error", {"message": SERVER_TEXT})
        raise session.errors.unavailable(error, f"read the log of {pod}")  # as the session does

    session.api.get = get  # type: ignore[method-assign]
    session.streams.read_log = read_log  # type: ignore[method-assign]
    config = KubernetesConfig()
    trials = Trials(session, config, None, SandboxClasses(session, config))  # type: ignore[arg-type]
    request = TrialRequest(trial_id="t1", image="busybox", timeout_seconds=1)
    with pytest.raises(AdapterUnavailable) as caught:
        await trials._watch_trial("pando-trial-t1", request)
    assert "log" in caught.value.message
    assert caught.value.details.get("status") == 500
    assert caught.value.details.get("exit_code") == 3, "what was seen is not lost"


# -- 4. an adapter whose start fails ---------------------------------------------------------


class _QuietCache(ClusterCache):
    """A cache whose watches run on quiet sources (the pods only)."""

    def __init__(self, session: ClusterSession) -> None:
        super().__init__(session.config, session.connection, session.api, session.errors)
        self.started: Informer | None = None

    async def _start(self, stack: AsyncExitStack, collect: Any) -> None:
        informer = Informer(None, sources={"pods": QuietSource()}, kinds=("pods",))
        await stack.enter_async_context(informer.running())
        self._stack, self._informer, self.started = stack, informer, informer


class _ScriptedSession(ClusterSession):
    """A session whose watches run on quiet sources and whose reads do what the test says."""

    def __init__(self, read: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        super().__init__(KubernetesConfig())
        self._read = read
        self.connection.transport = self._transport  # type: ignore[method-assign]
        self.api.get = self._get  # type: ignore[method-assign]
        self.api.status_of = self._status_of  # type: ignore[method-assign]
        self.cache = self.quiet = _QuietCache(self)

    async def _transport(self) -> Any:
        return SimpleNamespace(cluster=None)

    async def _get(self, path: str, what: str, **query: Any) -> dict[str, Any]:
        return await self._read()

    async def _status_of(self, path: str) -> int:  # the start's probe of the metrics API
        await self._read()
        return 200


async def test_the_watches_stop_when_the_start_fails_after_them() -> None:
    async def throttled() -> dict[str, Any]:
        raise RateLimited("throttled", retry_after=1.0)

    session = _ScriptedSession(throttled)
    adapter = KubernetesAdapter(KubernetesConfig(), session=session)
    with pytest.raises(RateLimited):
        await adapter.__aenter__()
    assert session.quiet.started is not None, "the watches were started"
    assert not session.quiet.started.active, "and stopped before the error left"
    assert session.cache.informer is None


async def test_the_watches_stop_when_the_start_is_cancelled() -> None:
    async def hangs() -> dict[str, Any]:
        await anyio.sleep_forever()
        return {}  # pragma: no cover

    session = _ScriptedSession(hangs)
    adapter = KubernetesAdapter(KubernetesConfig(), session=session)
    with anyio.move_on_after(0.3) as scope:
        await adapter.__aenter__()
    assert scope.cancelled_caught
    assert session.quiet.started is not None, "the watches were started"
    assert not session.quiet.started.active, "and stopped before the cancellation left"
    assert session.cache.informer is None


# -- 5. kubeconfig files the adapters cannot use ---------------------------------------------


async def test_a_kubeconfig_that_does_not_exist_is_named_in_the_multi_cluster_error(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere.yaml"
    adapter = MultiClusterAdapter({"kubeconfig": str(missing)})
    with pytest.raises(AdapterUnavailable) as caught:
        await adapter.capabilities()
    error = caught.value
    assert str(missing) in error.message
    assert "does not exist" in error.message
    assert error.details["problems"] == [f"{missing}: file does not exist"]
    assert "kubeconfig" in error.remedy


async def test_every_problem_of_the_kubeconfig_files_reaches_the_multi_cluster_error(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("- just a list\n")
    nameless = kubeconfig_file(tmp_path / "nameless.yaml", "east", current="east")
    doc = yaml.safe_load(nameless.read_text())
    doc["clusters"][0]["cluster"] = {}  # names no server
    nameless.write_text(yaml.safe_dump(doc))
    listed = os.pathsep.join([str(broken), str(nameless)])
    adapter = MultiClusterAdapter({"kubeconfig": listed})
    with pytest.raises(AdapterUnavailable) as caught:
        await adapter.capabilities()
    problems = caught.value.details["problems"]
    assert len(problems) == 2, problems
    assert problems[0].startswith(str(broken))
    assert problems[1].startswith(f"{nameless}, context 'east'")
    assert str(broken) in caught.value.message


async def test_a_kubeconfig_path_list_merges_as_kubeconfig_does(tmp_path: Path) -> None:
    first = kubeconfig_file(tmp_path / "a.yaml", "east", current="east")
    second = kubeconfig_file(tmp_path / "b.yaml", "west", "east", current="west")
    listed = os.pathsep.join([str(first), str(second)])
    adapter = MultiClusterAdapter({"kubeconfig": listed})
    with pytest.raises(AdapterUnavailable):
        await adapter.capacity()  # nothing listens on those ports
    assert list(adapter.members) == ["east", "west"], "both files, the first's current first"
    assert adapter.default_cluster == "east"
    single = KubernetesAdapter({"kubeconfig": listed, "context": "west"})
    transport = await single.session.connection.transport()
    assert transport.cluster == "west"
    assert transport.configuration.host == "https://127.0.0.1:9", "west as the second file has it"
    await single.aclose()


async def test_the_single_cluster_adapter_names_a_kubeconfig_that_does_not_exist(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere.yaml"
    adapter = KubernetesAdapter({"kubeconfig": str(missing)})
    with pytest.raises(AdapterUnavailable) as caught:
        await adapter.session.connection.transport()
    assert f"{missing}: file does not exist" in caught.value.message
    assert caught.value.details["problems"] == [f"{missing}: file does not exist"]
