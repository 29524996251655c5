"""Volumes: a PersistentVolumeClaim each, kept (Retain), backed up through a helper pod.

A volume lives in its bundle's namespace as the claim ``pando-vol-<id>``; its
PersistentVolume is set to ``Retain`` as soon as the claim is bound, so the
data outlives the app and even an accidental namespace deletion.
``destroy_volume`` sets it back to ``Delete`` and deletes the claim: the
provisioner then deletes the data.

Snapshot and restore stream tar through a helper pod that mounts the claim
(read-only for a snapshot) at ``<helper_mount_root>/<claim>``, placed on the
node of a pod already using the claim (a ReadWriteOnce claim cannot be
mounted on two nodes), and driven by exec. The helper is deleted on every
path, errors and cancellation included.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream

from pando_runtime import AdapterFailed, ExecRequest, NotFound, VolumeHandle, VolumeRequest
from pando_runtime.plugin import (
    RESTORE_SCRIPT,
    IteratorByteStream,
    raise_problems,
    validate_volume_request,
)

from .._info import KubernetesConfig
from .._names import (
    ANN_BUNDLE_ID,
    ANN_VOLUME_ID,
    ANN_VOLUME_NAME,
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    LABEL_VOLUME,
    MANAGED_BY,
    ROLE_VOLUME_HELPER,
    bundle_label,
    claim_name,
    helper_name,
    namespace_for,
)
from ..api._paths import api_path
from ..cache._podstatus import container_state, start_problem
from ..cache._projections import ClaimFacts, project_claim
from ..manifests._security import container_security
from ..manifests._workload_objects import PodSettings, place
from ..session._session import ClusterSession
from ._namespaces import AppNamespaces

__all__ = [
    "RESTORE_SCRIPT",
    "SNAPSHOT_SCRIPT",
    "Volumes",
    "claim_body",
    "helper_pod",
    "parse_handle",
    "volume_handle",
]

HELPER_CONTAINER = "helper"
# The mount point exists in a helper; ``mkdir -p`` is a no-op there (it matters only where exec
# runs outside a container, as kwok's does).
SNAPSHOT_SCRIPT = 'mkdir -p "$1" 2>/dev/null; cd "$1" && exec tar -cf - .'


def volume_handle(namespace: str, volume_id: str, bundle_id: str | None) -> VolumeHandle:
    """The handle of a volume: its namespace, id and owner (opaque to the host)."""
    return VolumeHandle(volume_id=volume_id, handle=f"{namespace}/{volume_id}/{bundle_id or ''}")


def parse_handle(handle: VolumeHandle) -> tuple[str, str, str | None]:
    """Namespace, volume id and bundle id of a handle this adapter made."""
    parts = handle.handle.split("/", 2)
    if len(parts) != 3 or not parts[0].startswith("pando-") or parts[1] != handle.volume_id:  # noqa: PLR2004
        raise NotFound(
            f"volume handle {handle.handle!r} was not made by the Kubernetes adapter",
            details={"volume_id": handle.volume_id},
        )
    return parts[0], parts[1], parts[2] or None


def claim_body(
    namespace: str,
    volume_id: str,
    *,
    bundle_id: str | None,
    name: str,
    size_bytes: int,
    storage_class: str | None,
) -> dict[str, Any]:
    """The claim of a volume: ReadWriteOnce, its size, the configured class."""
    claim = claim_name(volume_id)
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_VOLUME: claim}
    annotations = {ANN_VOLUME_ID: volume_id, ANN_VOLUME_NAME: name}
    if bundle_id is not None:
        labels[LABEL_BUNDLE] = bundle_label(bundle_id)
        annotations[ANN_BUNDLE_ID] = bundle_id
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(size_bytes)}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def helper_pod(
    namespace: str,
    claim: str,
    *,
    image: str,
    mount_path: str,
    read_only: bool,
    node_name: str | None,
    placement: PodSettings,
) -> dict[str, Any]:
    """A pod that mounts ``claim`` and idles, for exec to read or write the volume.

    It runs where app pods run (``placement``: their RuntimeClass and node selector), and on
    ``node_name`` when a pod there already mounts the claim.
    """
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "activeDeadlineSeconds": 3600,  # a helper left behind by a crash ends by itself
        "containers": [
            {
                "name": HELPER_CONTAINER,
                "image": image,
                "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "data", "mountPath": mount_path, "readOnly": read_only}],
                "securityContext": container_security(),
            }
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}
        ],
    }
    place(spec, placement)
    if node_name:
        spec["nodeName"] = node_name  # beside the pod that already mounts the RWO claim
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": helper_name(claim),
            "namespace": namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_ROLE: ROLE_VOLUME_HELPER,
                LABEL_VOLUME: claim,
            },
        },
        "spec": spec,
    }


def _ended(body: Mapping[str, Any]) -> str | None:
    status = body.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return f"it ended ({status.get('phase')}: {status.get('reason') or status.get('message')})"
    return None


class Volumes:
    """Volumes of one cluster: claims kept (Retain), destroyed, backed up, restored.

    The one owner of which volumes this process has already set to Retain.
    """

    def __init__(
        self, session: ClusterSession, config: KubernetesConfig, namespaces: AppNamespaces
    ) -> None:
        self._session = session
        self._config = config
        self._namespaces = namespaces
        self._retained: set[tuple[str, str]] = set()
        """Volumes (namespace, volume id) already set to Retain by this process."""

    # -- claims ---------------------------------------------------------------------------

    async def _claim(self, ns: str, volume_id: str) -> ClaimFacts | None:
        for facts in await self._session.reads.claims(ns):
            if facts.volume_id == volume_id:
                return facts
        return None

    async def ensure_claim(
        self,
        ns: str,
        volume_id: str,
        *,
        bundle_id: str | None,
        name: str,
        size_bytes: int | None,
    ) -> None:
        """Create the volume's claim unless it exists (a concurrent creation is no error)."""
        existing = await self._claim(ns, volume_id)
        if existing is not None and not existing.deleting:
            return
        body = claim_body(
            ns,
            volume_id,
            bundle_id=bundle_id,
            name=name,
            size_bytes=size_bytes or self._config.volume_size_bytes,
            storage_class=self._config.storage_class,
        )
        await self._session.writer.create_or_find(body, f"create the claim of volume {volume_id}")

    async def _bound_volume(self, ns: str, volume_id: str) -> str | None:
        path = api_path(ns, "persistentvolumeclaims", claim_name(volume_id))
        body = await self._session.api.find(path, f"read the claim of {volume_id}")
        facts = project_claim(body) if body is not None else None
        return facts.bound_to if facts is not None else None

    async def _set_reclaim(self, pv: str, policy: str) -> None:
        path = api_path(None, "persistentvolumes", pv)
        current = await self._session.api.find(path, f"read volume {pv}")
        if current is None:
            return
        if (current.get("spec") or {}).get("persistentVolumeReclaimPolicy") == policy:
            return
        body = {"spec": {"persistentVolumeReclaimPolicy": policy}}
        await self._session.writer.write(
            f"set volume {pv} to {policy}",
            lambda api: api.request(
                "PATCH", path, body=body, content_type="application/merge-patch+json"
            ),
        )

    async def retain(self, ns: str, volume_id: str, *, wait: float = 0.0) -> bool:
        """Set the claim's volume to Retain once it is bound; false while it is not bound."""
        if (ns, volume_id) in self._retained:
            return True
        pv = None
        with anyio.move_on_after(wait):
            while True:
                pv = await self._bound_volume(ns, volume_id)
                if pv is not None or wait <= 0:
                    break
                await anyio.sleep(0.2)
        if pv is None:
            return False
        await self._set_reclaim(pv, "Retain")
        self._retained.add((ns, volume_id))
        return True

    async def destroy_claim(self, ns: str, volume_id: str) -> None:
        """Reclaim policy back to Delete, then delete the claim: the data goes with it."""
        pv = await self._bound_volume(ns, volume_id)
        if pv is not None:
            await self._set_reclaim(pv, "Delete")
        await self._session.writer.delete(ns, "persistentvolumeclaims", claim_name(volume_id))
        self._retained.discard((ns, volume_id))
        self._session.cache.forget_claim(ns, volume_id)

    # -- the contract ---------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """A claim in the bundle's namespace (made when absent); its volume is set to Retain."""
        raise_problems(validate_volume_request(request), f"volume {request.volume_id!r}")
        ns = namespace_for(request.bundle_id)
        async with self._session.lock(ns):
            await self._namespaces.ensure_for_volumes(ns, request.bundle_id)
            await self.ensure_claim(
                ns,
                request.volume_id,
                bundle_id=request.bundle_id,
                name=request.name,
                size_bytes=request.size_bytes,
            )
        await self.retain(ns, request.volume_id, wait=self._config.volume_bind_wait)
        return volume_handle(ns, request.volume_id, request.bundle_id)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        """Delete the volume and its data; its namespace goes too when nothing else is left."""
        ns, volume_id, _ = parse_handle(handle)
        async with self._session.lock(ns):
            await self.destroy_claim(ns, volume_id)
            await self._namespaces.drop_if_only_volumes(ns)

    async def _helper_node(self, ns: str, claim: str) -> str | None:
        """The node of a live pod mounting ``claim`` (ReadWriteOnce: the helper must go there)."""
        for pod in await self._session.reads.pods(ns):
            if claim in (pod.claims or ()) and pod.live and pod.node_name:
                return pod.node_name
        return None

    @contextlib.asynccontextmanager
    async def _helper(
        self, ns: str, volume_id: str, *, read_only: bool
    ) -> AsyncIterator[tuple[str, str]]:
        """A running helper pod mounting the volume: yields its name and the mount path."""
        claim = claim_name(volume_id)
        mount_path = posixpath.join(self._config.helper_mount_root, claim)
        body = helper_pod(
            ns,
            claim,
            image=self._config.helper_image,
            mount_path=mount_path,
            read_only=read_only,
            node_name=await self._helper_node(ns, claim),
            placement=PodSettings(self._config.runtime_class, self._config.node_selector),
        )
        name = body["metadata"]["name"]
        await self._session.writer.create(body, f"create the volume helper of {volume_id}")
        try:
            await self._until_running(
                ns, name, HELPER_CONTAINER, f"the volume helper of {volume_id}"
            )
            yield name, mount_path
        finally:
            with anyio.CancelScope(shield=True):
                await self._session.writer.delete(ns, "pods", name, grace=0)

    async def _until_running(self, ns: str, name: str, container: str, what: str) -> dict[str, Any]:
        wait = self._config.helper_wait
        body: dict[str, Any] = {}
        with anyio.move_on_after(wait):
            while True:
                body = await self._session.api.get(api_path(ns, "pods", name), f"read {what}")
                if container_state(body, container).get("running"):
                    return body
                problem = _ended(body) or start_problem(body)
                if problem:
                    raise AdapterFailed(f"{what} does not run: {problem}", details={"pod": name})
                await anyio.sleep(0.2)
        raise AdapterFailed(
            f"{what} did not start within {wait:.0f} s",
            remedy="Check that the volume's claim is bound and a node can mount it.",
            details={"pod": name},
        )

    async def _existing_claim(self, ns: str, volume_id: str) -> None:
        facts = await self._claim(ns, volume_id)
        if facts is None or facts.deleting:
            raise NotFound(f"volume {volume_id!r} does not exist", details={"volume_id": volume_id})

    @contextlib.asynccontextmanager
    async def snapshot_volume(self, handle: VolumeHandle) -> AsyncIterator[ByteReceiveStream]:
        """The volume's files as a tar stream, read by a helper that mounts it read-only."""
        ns, volume_id, _ = parse_handle(handle)
        await self._existing_claim(ns, volume_id)
        await self.retain(ns, volume_id)
        async with self._helper(ns, volume_id, read_only=True) as (pod, path):
            request = ExecRequest(command=("sh", "-c", SNAPSHOT_SCRIPT, "sh", path))
            async with self._session.streams.exec(ns, pod, HELPER_CONTAINER, request) as session:

                async def chunks() -> AsyncIterator[bytes]:
                    async for chunk in session.stdout:
                        yield chunk
                    code = await session.wait()
                    if code != 0:
                        err = b"".join([c async for c in session.stderr])
                        raise AdapterFailed(
                            f"the snapshot of volume {volume_id} failed (exit {code}): "
                            f"{err.decode(errors='replace').strip()}"
                        )

                stream = IteratorByteStream(chunks())
                try:
                    yield stream
                finally:
                    await stream.aclose()
        await self.retain(ns, volume_id)

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        """Replace the volume's files with a tar stream, in place; creates the volume if absent."""
        ns, volume_id, bundle_id = parse_handle(handle)
        async with self._session.lock(ns):
            if await self._claim(ns, volume_id) is None:
                await self._namespaces.ensure_for_volumes(ns, bundle_id)
                await self.ensure_claim(
                    ns, volume_id, bundle_id=bundle_id, name=volume_id, size_bytes=None
                )
        async with self._helper(ns, volume_id, read_only=False) as (pod, path):
            request = ExecRequest(command=("sh", "-c", RESTORE_SCRIPT, "sh", path), stdin=True)
            async with self._session.streams.exec(ns, pod, HELPER_CONTAINER, request) as session:
                errors: list[bytes] = []

                async def feed() -> None:
                    assert session.stdin is not None  # noqa: S101 - asked for above
                    async for chunk in source:
                        await session.stdin.send(chunk)
                    await session.stdin.aclose()

                async def drain(stream: ByteReceiveStream, into: list[bytes] | None) -> None:
                    async for chunk in stream:
                        if into is not None:
                            into.append(chunk)

                async with anyio.create_task_group() as group:
                    group.start_soon(feed)
                    group.start_soon(drain, session.stdout, None)
                    group.start_soon(drain, session.stderr, errors)
                code = await session.wait()
        if code != 0:
            raise AdapterFailed(
                f"the restore of volume {volume_id} failed (exit {code}): "
                f"{b''.join(errors).decode(errors='replace').strip()}",
                details={"volume_id": volume_id},
            )
        await self.retain(ns, volume_id)
