"""What the Docker adapter's test modules share: settings, plans and waits.

A module of its own (not ``conftest``): the whole suite collects every adapter's tests, and
``conftest`` names the first one imported, the core's.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
from _docker_harness import BUSYBOX
from pando_runtime_docker import DockerAdapter

import pando_runtime as pr

ENV_HOST = "PANDO_DOCKER_TEST_HOST"
"""Points the tests at an engine of your own instead of the harness's."""


def adapter_config(host: str | None, owner: str, **more: Any) -> dict[str, Any]:
    """Settings for a test's adapter: quick stops and dependency waits (``host`` ``None``:
    the engine is named otherwise, by a context in ``more``)."""
    return {
        **({"host": host} if host is not None else {}),
        "owner": owner,
        "stop_timeout": 1,
        "dependency_wait": 30,
        "helper_image": BUSYBOX,
        **more,
    }


def tls_settings(engine: Any, proxy: Any) -> dict[str, Any]:
    """The adapter's settings for the harness's engine over TLS, through ``proxy``."""
    tls = engine.tls
    return {
        "host": proxy.host,
        "tls_ca": str(tls.ca.cert),
        "tls_cert": str(tls.client.cert),
        "tls_key": str(tls.client.key),
    }


def ssh_settings(engine: Any, sshd: Any, proxy: Any) -> dict[str, Any]:
    """The adapter's settings for the harness's engine over SSH (sshd through ``proxy``):
    root's key, the host key pinned, the engine's socket on that host."""
    return {
        "host": f"ssh://root@127.0.0.1:{proxy.port}",
        "ssh_host_key": sshd.host_public_key,
        "ssh_identity": str(sshd.client_key),
        "ssh_socket": str(engine.socket_path),
    }


def write_context(
    folder: Path,
    name: str,
    host: str,
    *,
    tls: dict[str, Path] | None = None,
    skip_verify: bool = False,
) -> None:
    """A Docker context in the configuration folder ``folder``, as ``docker context create``
    stores it (``tls``: ``ca.pem``, ``cert.pem``, ``key.pem`` by the files to copy)."""
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = folder / "contexts" / "meta" / digest
    meta.mkdir(parents=True)
    endpoint = {"Host": host, "SkipTLSVerify": skip_verify}
    document = {"Name": name, "Metadata": {}, "Endpoints": {"docker": endpoint}}
    (meta / "meta.json").write_text(json.dumps(document))
    for file_name, source in (tls or {}).items():
        target = folder / "contexts" / "tls" / digest / "docker" / file_name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
        target.chmod(0o600)


SLEEP = ("sh", "-c", "trap 'exit 143' TERM; while :; do sleep 0.2; done")


def workload(name: str, **fields: object) -> pr.WorkloadPlan:
    fields.setdefault("image", BUSYBOX)
    fields.setdefault("command", SLEEP)
    return pr.WorkloadPlan(name=name, **fields)  # type: ignore[arg-type]


async def until(adapter: DockerAdapter, bundle_id: str, check, what: str) -> pr.ObservedBundle:  # type: ignore[no-untyped-def]
    with anyio.fail_after(60):
        while True:
            observed = await adapter.observe(pr.BundleRef(bundle_id))
            if check(observed):
                return observed
            await anyio.sleep(0.1)
    msg = f"timed out waiting for {what}"
    raise AssertionError(msg)


def running(observed: pr.ObservedBundle) -> bool:
    return observed.all_running and bool(observed.workloads)


def name_of(adapter: DockerAdapter, bundle_id: str, workload_name: str) -> str:
    return adapter.naming.container_name(bundle_id, workload_name)
