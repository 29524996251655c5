"""Installing the shipped admission policies (deploy/admission.yaml) as an installer would.

The parameters name the adapter's test identity and the edge namespace. Policies start and
stop asynchronously in the API server, so installing waits until a probe is denied and
removing waits until it is admitted again (only then do the parameters go: without them every
matched request is denied). Used by every module that needs the policies; each removes them at
its end, so other modules' administrator actions are not affected.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

ADMISSION = Path(__file__).resolve().parents[1] / "deploy" / "admission.yaml"
PARAMS_NAMESPACE = "pando"
PARAMS = "pando-runtime-admission"
IMAGE = "registry.example/admission/app:1"
MANAGED = {"app.kubernetes.io/managed-by": "pando"}


def admission_docs() -> list[dict[str, Any]]:
    """The shipped policies and bindings, in file order."""
    return [d for d in yaml.safe_load_all(ADMISSION.read_text()) if d]


def probe_pod(name: str, *, container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod body for administrator calls."""
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": IMAGE, **(container or {})}], **spec},
    }


def probe_service(name: str, kind: str) -> dict[str, Any]:
    """A Service body of ``kind`` for administrator calls."""
    spec: dict[str, Any] = {"type": kind}
    if kind == "ExternalName":
        spec["externalName"] = "example.com"
    else:
        spec["ports"] = [{"port": 80}]
        spec["selector"] = {"app": name}
    return {"metadata": {"name": name}, "spec": spec}


def wait_admitted(call: Callable[[], Any], needle: str, timeout: float = 30.0) -> None:
    """Retry a dry-run ``call`` until the policies no longer deny it (they stop lazily)."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
        except ApiException as error:
            if needle not in str(error.body):
                raise
        else:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the policies did not stop denying ({needle!r})")
        time.sleep(0.3)


def wait_denied(call: Callable[[], Any], needle: str, timeout: float = 30.0) -> None:
    """Retry a dry-run ``call`` until the policies deny it (they start asynchronously)."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
        except ApiException as error:
            if needle in str(error.body):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"the policies did not start denying ({needle!r})")
        time.sleep(0.3)


def _fenced_probe(core: Any, ns: str) -> Callable[[], Any]:
    body = {
        "metadata": {"name": "probe", "annotations": {"pando.dev/written-under": "0/nobody"}},
        "data": {},
    }
    return lambda: core.create_namespaced_config_map(ns, body, dry_run="All")


@contextlib.contextmanager
def installed_admission(
    admin_api: Any, adapter_user: str, edge_namespace: str
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """The shipped policies and bindings, enforcing; removed afterwards.

    Yields the documents and a managed probe namespace without Pod Security's label (the
    backstop alone guards it), stamped ``1/probe`` (so the fence guards it too).
    """
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    core = client.CoreV1Api(admin_api)
    admission = client.AdmissionregistrationV1Api(admin_api)
    with contextlib.suppress(ApiException):
        core.create_namespace({"metadata": {"name": PARAMS_NAMESPACE}})
    params = {
        "metadata": {"name": PARAMS, "namespace": PARAMS_NAMESPACE},
        "data": {"adapter-user": adapter_user, "edge-namespace": edge_namespace},
    }
    core.create_namespaced_config_map(PARAMS_NAMESPACE, params)
    docs = admission_docs()
    probe_ns = f"pando-backstop-{uuid.uuid4().hex[:6]}"
    created = False
    try:
        for doc in docs:
            if doc["kind"] == "ValidatingAdmissionPolicy":
                admission.create_validating_admission_policy(doc)
            else:
                admission.create_validating_admission_policy_binding(doc)
        stamp = {"pando.dev/fence": "1/probe"}
        core.create_namespace(
            {"metadata": {"name": probe_ns, "labels": MANAGED, "annotations": stamp}}
        )
        created = True
        hostile = probe_pod("probe", hostNetwork=True)
        pod = lambda: core.create_namespaced_pod(probe_ns, hostile, dry_run="All")  # noqa: E731
        external = probe_service("probe", "ExternalName")
        service = lambda: core.create_namespaced_service(probe_ns, external, dry_run="All")  # noqa: E731
        delete = lambda: core.delete_namespace(probe_ns, dry_run="All")  # noqa: E731
        wait_denied(pod, "pando: pods")
        wait_denied(service, "pando: ExternalName")
        wait_denied(delete, "pando: only the")
        wait_denied(_fenced_probe(core, probe_ns), "pando: fenced")
        yield docs, probe_ns
    finally:
        for doc in sorted(docs, key=lambda d: d["kind"] == "ValidatingAdmissionPolicy"):
            name = doc["metadata"]["name"]
            try:
                if doc["kind"] == "ValidatingAdmissionPolicy":
                    admission.delete_validating_admission_policy(name)
                else:
                    admission.delete_validating_admission_policy_binding(name)
            except ApiException as error:
                if error.status != 404:
                    raise
        # The API server drops policies a moment after they are deleted; the parameters go
        # only when nothing enforces them, else the adapter's own deletes elsewhere are denied.
        if created:
            wait_admitted(
                lambda: core.create_namespaced_pod(
                    probe_ns, probe_pod("probe", hostNetwork=True), dry_run="All"
                ),
                "pando: pods",
            )
            wait_admitted(_fenced_probe(core, probe_ns), "pando: fenced")
            wait_admitted(lambda: core.delete_namespace(probe_ns, dry_run="All"), "pando: only the")
            core.delete_namespace(probe_ns)
        core.delete_namespaced_config_map(PARAMS, PARAMS_NAMESPACE)
