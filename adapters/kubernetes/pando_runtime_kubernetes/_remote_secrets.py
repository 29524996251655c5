"""Clusters from remote secrets, followed while the multi-cluster adapter runs.

Istio's format: Secrets labelled ``istio/multiCluster: "true"`` in one namespace of the default
cluster (``remote_secrets_namespace``), each data key a cluster's name and its value a
kubeconfig; and Cluster API's ``<cluster>-kubeconfig`` Secrets in the same namespace (label
``cluster.x-k8s.io/cluster-name`` naming the cluster, key ``value``). They are listed and
watched (the cache's own watch loop, one per format); each change of the set is made a change
of the fleet's members (``pando_runtime.fleet``): a new key joins, a changed kubeconfig
(SHA-256) replaces its member make-before-break, a removed key leaves. A kubeconfig that cannot
be used is refused (a log record and a ``FLEET_CHANGED`` event) and not tried again until it
changes; so is a name taken by the kubeconfig's clusters or by another Secret (the Secret first
by name keeps it). Exec plugins, auth providers and file paths are refused: a Secret's
kubeconfig carries its credentials inline. Credentials are never logged: a reason names the
Secret, the key and what is wrong, never a value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.to_thread
import attrs
from anyio.abc import TaskStatus

from pando_runtime.fleet import MemberChanges

from ._log import logger
from .api._clusters import Cluster
from .api._errors import ApiError
from .api._kubeconfig import MergedKubeconfig
from .cache._list_watch import ApiListWatch
from .cache._watch import WatchLoop, why

if TYPE_CHECKING:
    from ._adapter import KubernetesAdapter

__all__ = [
    "CLUSTER_API",
    "CLUSTER_API_LABEL",
    "FORMATS",
    "ISTIO",
    "REMOTE_SECRET_LABEL",
    "RemoteSecrets",
    "SecretFormat",
    "cluster_from_kubeconfig",
]

log = logger("multi")

REMOTE_SECRET_LABEL = "istio/multiCluster=true"  # noqa: S105 - a label, not a secret
"""The label selector of Istio's remote secrets."""
CLUSTER_API_LABEL = "cluster.x-k8s.io/cluster-name"
"""The label of Cluster API's kubeconfig Secrets: the cluster's name."""

_NOT_INLINE = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile", "exec", "auth-provider")),
}
"""What a Secret's kubeconfig may not use: files of the host, and plugins run on it."""


def _refusals(doc: Mapping[str, Any]) -> list[str]:
    problems = []
    for section, (body, keys) in _NOT_INLINE.items():
        for entry in doc.get(section) or []:
            fields = entry.get(body) if isinstance(entry, dict) else None
            if isinstance(fields, dict):
                name = entry.get("name")
                problems += [f"{section}[{name!r}] uses {key!r}" for key in keys if key in fields]
    return problems


def cluster_from_kubeconfig(name: str, data: bytes, where: str) -> Cluster:
    """Cluster ``name`` from a kubeconfig given inline (its current context; blocking).

    Raises:
        ValueError: why it cannot be used, naming ``where`` and never a value of it.
    """
    import yaml  # noqa: PLC0415 - with the first kubeconfig, as the files' loader

    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError:
        raise ValueError(f"{where}: not a kubeconfig (not YAML)") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: not a kubeconfig (the document is not a mapping)")  # noqa: TRY004
    if refused := _refusals(doc):
        raise ValueError(
            f"{where}: only inline credentials are taken from a Secret ({'; '.join(refused)})"
        )
    merged = MergedKubeconfig.of_document(where, doc)
    contexts = merged.contexts
    context = merged.current_context or (contexts[0] if len(contexts) == 1 else None)
    if context is None or context not in contexts:
        raise ValueError(f"{where}: no current-context naming one of its contexts")
    try:
        configuration = merged.load(context)
    except Exception as error:  # noqa: BLE001 - the loader's own errors; its text is not kept
        raise ValueError(
            f"{where}: its context {context!r} cannot be loaded ({type(error).__name__})"
        ) from None
    return Cluster(name, configuration, source=where, namespace=merged.namespace(context))


def _decoded(value: Any) -> bytes:
    try:
        return base64.b64decode(value or "", validate=True)
    except (binascii.Error, TypeError, ValueError):
        return b""  # refused as not a kubeconfig


@attrs.frozen
class SecretFormat:
    """Which Secrets hold clusters (a label selector), and the clusters one holds, by name."""

    name: str
    selector: str
    clusters: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, bytes]]
    """The clusters of a Secret, from its labels and its data (values base64-encoded)."""


ISTIO = SecretFormat(
    "istio",
    REMOTE_SECRET_LABEL,
    lambda _labels, data: {key: _decoded(value) for key, value in data.items()},
)
"""Istio's remote secrets: each data key a cluster's name, its value a kubeconfig."""

CLUSTER_API = SecretFormat(
    "cluster-api",
    CLUSTER_API_LABEL,
    lambda labels, data: (
        {str(labels[CLUSTER_API_LABEL]): _decoded(data["value"])}
        if labels.get(CLUSTER_API_LABEL) and "value" in data
        else {}
    ),
)
"""Cluster API's ``<cluster>-kubeconfig`` Secrets: the cluster named by its label, ``value``."""

FORMATS = (ISTIO, CLUSTER_API)


class _Seen:
    """One format's Secrets as its watch sees them: by Secret name, each cluster's kubeconfig."""

    def __init__(self, form: SecretFormat, changed: Callable[[], None]) -> None:
        self.form = form
        self.secrets: dict[str, dict[str, bytes]] = {}
        self._changed = changed

    def project(self, obj: dict[str, Any]) -> tuple[str, dict[str, bytes]]:
        meta = obj.get("metadata") or {}
        clusters = self.form.clusters(meta.get("labels") or {}, obj.get("data") or {})
        return str(meta.get("name", "")), clusters

    def on_list(self, items: list[Any], relist: bool) -> None:
        self.secrets = dict(items)
        self._changed()

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        name, clusters = self.project(obj)
        if kind == "DELETED":
            self.secrets.pop(name, None)
        else:
            self.secrets[name] = clusters
        self._changed()

    def __repr__(self) -> str:  # never the values
        return f"_Seen({self.form.name}, {sorted(self.secrets)})"


class Clusters(Protocol):
    """What the remote secrets change: the multi-cluster adapter's members (``_members``)."""

    adapters: dict[str, KubernetesAdapter]
    default: str

    @property
    def configured(self) -> frozenset[str]: ...

    def made_from(self, name: str, cluster: Cluster) -> KubernetesAdapter: ...

    def now(self, name: str, adapter: object) -> None: ...


class RemoteSecrets:
    """Follows the remote secrets of one namespace and changes the fleet's members to match."""

    def __init__(self, members: Clusters, changes: MemberChanges, namespace: str) -> None:
        self.members = members
        self.changes = changes
        self.namespace = namespace
        self._changed = anyio.Event()
        self.seen = [_Seen(form, self._poke) for form in FORMATS]
        self.taken: dict[str, str] = {}
        """The clusters from Secrets that are members, by name: their kubeconfig's SHA-256."""
        self._refused: dict[str, str] = {}
        """What was refused (by cluster and Secret), with its SHA-256: not tried again as is."""

    def _poke(self) -> None:
        self._changed.set()

    async def run(self, *, wait: float, task_status: TaskStatus[None]) -> None:
        """Watch, join the first clusters (``task_status.started()`` then), follow changes."""
        default = self.members.adapters[self.members.default]
        transport = await default.session.connection.transport()
        path = f"/api/v1/namespaces/{self.namespace}/secrets"
        loops = [
            WatchLoop(
                ApiListWatch(transport, path, label_selector=seen.form.selector),
                seen,
                name=f"{seen.form.name} secrets",
                log_extra={"namespace": self.namespace},
            )
            for seen in self.seen
        ]
        async with anyio.create_task_group() as group:
            for loop in loops:
                group.start_soon(loop.run)
            with anyio.move_on_after(wait):  # the default cluster silent: not held up for good
                for loop in loops:
                    await loop.synced.wait()
            if not all(loop.synced.is_set() for loop in loops):
                errors = [loop.last_error for loop in loops if loop.last_error is not None]
                forbidden = any(
                    isinstance(e, ApiError) and e.status == HTTPStatus.FORBIDDEN for e in errors
                )
                log.warning(
                    "the remote secrets of %s could not be listed within %g s (%s)%s; clusters "
                    "join once they are",
                    self.namespace,
                    wait,
                    ", ".join(why(e) for e in errors) or "no answer",
                    "; bind ClusterRole pando-runtime-remote-secrets there with a RoleBinding "
                    "(deploy/rbac.yaml)"
                    if forbidden
                    else "",
                )
            await self._reconcile()
            task_status.started()
            while True:
                await self._changed.wait()
                self._changed = anyio.Event()
                await self._reconcile()

    def _wanted(self) -> dict[str, tuple[str, str, bytes]]:
        """Each cluster the Secrets name: (where, SHA-256, kubeconfig); clashes refused."""
        wanted: dict[str, tuple[str, str, bytes]] = {}
        static = self.members.configured
        secrets = {name: held for seen in self.seen for name, held in seen.secrets.items()}
        for secret in sorted(secrets):
            for name, data in sorted(secrets[secret].items()):
                where = f"Secret {self.namespace}/{secret}, key {name!r}"
                sha = hashlib.sha256(data).hexdigest()
                if name in static:
                    self._refuse_once(name, where, sha, "a cluster of the kubeconfig has that name")
                elif name in wanted:
                    self._refuse_once(name, where, sha, f"named already by {wanted[name][0]}")
                else:
                    wanted[name] = (where, sha, data)
        return wanted

    def _refuse_once(self, name: str, where: str, sha: str, reason: str) -> None:
        if self._refused.get(f"{name}@{where}") != sha:
            self._refused[f"{name}@{where}"] = sha
            self.changes.refuse(name, f"{where}: {reason}")

    async def _reconcile(self) -> None:
        wanted = self._wanted()
        for name in [n for n in self.taken if n not in wanted]:
            del self.taken[name]
            await self.changes.leave(name)
            self.members.now(name, None)
        async with anyio.create_task_group() as group:  # one cluster never holds up another
            for name, (where, sha, data) in wanted.items():
                if self.taken.get(name) != sha and self._refused.get(f"{name}@{where}") != sha:
                    group.start_soon(self._take, name, where, sha, data)

    async def _take(self, name: str, where: str, sha: str, data: bytes) -> None:
        try:
            cluster = await anyio.to_thread.run_sync(cluster_from_kubeconfig, name, data, where)
        except ValueError as error:
            self._refused[f"{name}@{where}"] = sha
            self.changes.refuse(name, str(error))
            return
        adapter = self.members.made_from(name, cluster)
        replacing = name in self.taken
        self.taken[name] = sha
        if replacing:
            await self.changes.replace(name, adapter)
        else:
            await self.changes.join(name, adapter)
        self.members.now(name, self.changes.adapter(name))
