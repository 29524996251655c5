"""Leases as the Kubernetes adapter writes and reads them, and its identity (no cluster)."""

from __future__ import annotations

import http.server
import threading
from typing import ClassVar

import pytest
from kubernetes.client import Configuration
from pando_runtime_kubernetes._info import adapter_version
from pando_runtime_kubernetes.api._transport import KubeTransport, user_agent
from pando_runtime_kubernetes.features._membership import lease_object, stored_lease

from pando_runtime import LeaseRecord


def test_a_lease_reads_back_as_written_and_shows_kubectl_its_holder() -> None:
    record = LeaseRecord(holder="a", renewals=7, duration=0.6, view=("a", "b"))
    obj = lease_object("pando", "members", "a", record)
    assert obj["metadata"]["name"] == "pando-replica-a"
    assert obj["spec"]["holderIdentity"] == "a"
    assert obj["spec"]["leaseDurationSeconds"] == 1, "whole seconds, at least 1"
    obj["metadata"]["resourceVersion"] = "42"
    stored = stored_lease(obj)
    assert stored is not None
    assert (stored.name, stored.record, stored.version) == ("a", record, "42")


def test_a_singletons_lease_has_no_members_and_a_foreign_lease_is_ignored() -> None:
    record = LeaseRecord(holder="b", renewals=0, duration=15.0)
    obj = lease_object("pando", "singletons", "catalog-sync", record)
    assert obj["metadata"]["name"] == "pando-singleton-catalog-sync"
    assert "pando.dev/members" not in obj["metadata"]["annotations"]
    obj["metadata"]["resourceVersion"] = "1"
    assert stored_lease(obj) is not None
    foreign = {"metadata": {"name": "kube-scheduler", "resourceVersion": "9"}, "spec": {}}
    assert stored_lease(foreign) is None


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with an empty JSON object and keeps its User-Agent."""

    agents: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.agents.append(self.headers.get("User-Agent", ""))
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.anyio
async def test_requests_name_the_adapter_and_its_version_and_a_members_its_replica() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    transport = KubeTransport(Configuration(host=f"http://127.0.0.1:{server.server_port}"))
    _Recorder.agents.clear()
    try:
        await transport.get("/api/v1/namespaces")
        transport.identify("replica-b")
        await transport.get("/api/v1/namespaces")
        async with transport.stream("/api/v1/pods", read_timeout=5) as stream:
            await stream.receive()
        transport.identify(None)
        await transport.get("/api/v1/namespaces")
    finally:
        transport.close()
        server.shutdown()
        server.server_close()
    version = adapter_version()
    assert version != "unknown"
    alone = f"pando-runtime-kubernetes/{version}"
    member = f"{alone} replica/replica-b"
    assert _Recorder.agents == [alone, member, member, alone]
    assert user_agent() == alone
    assert user_agent("replica-b") == member
