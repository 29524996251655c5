"""Catalog source: a cluster's Services (and the Ingress hosts routing to them).

Three :class:`Controller` watches feed it: Services, Nodes (their addresses, for NodePort
Services) and Ingresses (their hosts). Each keeps small projections; once all three have
synced, every change recomputes the whole desired set and hands it to the syncer (a
restarting source never hands over a partial set).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs

from pando_runtime import InvalidConfig, Problem
from pando_runtime.catalog import CatalogRegistration, Syncer

from ..api._transport import KubeTransport
from ._controller import Controller, Resource

__all__ = [
    "ANN_CATALOG_NAME",
    "ANN_CATALOG_PORT",
    "ANN_CATALOG_SYNC",
    "NODE_PORT_MODES",
    "ServiceSource",
    "ServiceSyncOptions",
    "open_service_source",
    "service_sync_options",
]

log = logging.getLogger("pando_runtime_kubernetes.catalog")
log.addHandler(logging.NullHandler())

ANN_CATALOG_SYNC = "pando.dev/catalog-sync"
"""``"true"``: sync this Service (needed when ``default_sync`` is off); ``"false"``: never."""
ANN_CATALOG_NAME = "pando.dev/catalog-name"
"""The service name in the catalog, instead of the derived one."""
ANN_CATALOG_PORT = "pando.dev/catalog-port"
"""Which port to register (its name or number); default: the first."""

NODE_PORT_MODES = ("external-only", "external-first", "internal-only")
_NAMESPACE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(str(v) for v in value)


@attrs.frozen(kw_only=True)
class ServiceSyncOptions:
    """What to sync of the cluster's Services, and under which names.

    Checked on creation: a bad value raises :class:`~pando_runtime.InvalidConfig` naming it.
    """

    allow_namespaces: tuple[str, ...] = attrs.field(default=("*",), converter=_names)
    """Namespaces whose Services are synced; ``*``: all."""
    deny_namespaces: tuple[str, ...] = attrs.field(
        default=("kube-system", "kube-public"), converter=_names
    )
    """Namespaces never synced (deny wins over allow)."""
    default_sync: bool = True
    """Sync every allowed Service unless annotated ``pando.dev/catalog-sync: "false"``; off:
    only those annotated ``"true"``."""
    prefix: str = ""
    """Put before every derived service name."""
    namespace_suffix: bool = False
    """Add ``-<namespace>`` to every derived service name."""
    sync_cluster_ip: bool = True
    """Register ClusterIP Services (at their cluster IP)."""
    node_port_mode: str = "external-only"
    """NodePort Services: each node's ExternalIP (``external-only``), ExternalIP else
    InternalIP (``external-first``), or InternalIP (``internal-only``)."""
    sync_load_balancer: bool = True
    """Register LoadBalancer Services at each ingress address of their status."""
    sync_ingress: bool = False
    """Register each host of an Ingress that routes to a synced Service (port 443 when the
    host has TLS, else 80)."""
    tags: tuple[str, ...] = attrs.field(default=("k8s",), converter=_names)
    node: str = "k8s-sync"
    """The synthetic catalog node the registrations are made under."""

    def __attrs_post_init__(self) -> None:
        problems = []
        for field in ("allow_namespaces", "deny_namespaces"):
            for index, name in enumerate(getattr(self, field)):
                if name != "*" and not _NAMESPACE.match(name):
                    problems.append(
                        Problem(
                            f"{field}[{index}]",
                            f"{name!r} is neither a namespace name nor '*'",
                            "invalid",
                        )
                    )
        if self.node_port_mode not in NODE_PORT_MODES:
            problems.append(
                Problem(
                    "node_port_mode",
                    f"{self.node_port_mode!r} is not one of {', '.join(NODE_PORT_MODES)}",
                    "invalid",
                )
            )
        if not self.node:
            problems.append(Problem("node", "must not be empty", "required"))
        if problems:
            raise InvalidConfig("the Service sync options are not valid", problems)

    def namespace_allowed(self, namespace: str) -> bool:
        """Whether Services of ``namespace`` may be synced (deny wins)."""
        if namespace in self.deny_namespaces or "*" in self.deny_namespaces:
            return False
        return "*" in self.allow_namespaces or namespace in self.allow_namespaces


@attrs.frozen
class _Service:
    """What the source needs of a Service."""

    namespace: str
    name: str
    type: str
    cluster_ip: str | None
    ports: tuple[tuple[str, int, int | None], ...]
    """(name, port, nodePort) of each port."""
    annotations: tuple[tuple[str, str], ...]
    ingress: tuple[str, ...]
    """Load-balancer ingress IPs or host names."""

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)


def _project_service(obj: dict[str, Any]) -> _Service:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    mine = tuple(sorted((k, v) for k, v in annotations.items() if k.startswith("pando.dev/")))
    lb = (obj.get("status") or {}).get("loadBalancer") or {}
    return _Service(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        type=spec.get("type") or "ClusterIP",
        cluster_ip=spec.get("clusterIP") or None,
        ports=tuple(
            (str(p.get("name") or ""), int(p.get("port") or 0), p.get("nodePort"))
            for p in spec.get("ports") or ()
        ),
        annotations=mine,
        ingress=tuple(i.get("ip") or i.get("hostname") or "" for i in lb.get("ingress") or ()),
    )


def _project_node(obj: dict[str, Any]) -> tuple[str | None, str | None]:
    """(ExternalIP, InternalIP) of a node."""
    addresses = {
        a.get("type"): a.get("address") for a in (obj.get("status") or {}).get("addresses") or ()
    }
    return addresses.get("ExternalIP"), addresses.get("InternalIP")


def _project_ingress(obj: dict[str, Any]) -> tuple[tuple[str, str, bool], ...]:
    """(host, Service name, TLS) of each rule path of an Ingress."""
    spec = obj.get("spec") or {}
    tls_hosts = {h for t in spec.get("tls") or () for h in t.get("hosts") or ()}
    out = set()
    for rule in spec.get("rules") or ():
        host = rule.get("host")
        if not host:
            continue
        for path in (rule.get("http") or {}).get("paths") or ():
            service = ((path.get("backend") or {}).get("service") or {}).get("name")
            if service:
                out.add((host, service, host in tls_hosts))
    return tuple(sorted(out))


class ServiceSource:
    """Publishes a cluster's Services to a :class:`~pando_runtime.catalog.Syncer`, per the options.

    ``async with source.running():`` runs its watches until the block ends.
    """

    def __init__(
        self,
        transport: KubeTransport | None,
        syncer: Syncer,
        options: ServiceSyncOptions | None = None,
        *,
        sources: Mapping[str, Any] | None = None,
        watch_timeout: int = 290,
    ) -> None:
        self.syncer = syncer
        self.options = options or ServiceSyncOptions()
        self._wake = anyio.Event()
        self.published = 0
        """Whole sets handed to the syncer so far."""

        def controller(
            resource: Resource, project: Callable[[dict[str, Any]], Any]
        ) -> Controller[Any]:
            return Controller(
                transport,
                resource,
                upsert=self._changed,
                delete=self._changed,
                project=project,
                source=(sources or {}).get(resource.plural),
                watch_timeout=watch_timeout,
            )

        self.services = controller(Resource(version="v1", plural="services"), _project_service)
        self.nodes = controller(Resource(version="v1", plural="nodes"), _project_node)
        self.ingresses: Controller[Any] | None = None
        if self.options.sync_ingress:
            self.ingresses = controller(
                Resource(group="networking.k8s.io", version="v1", plural="ingresses"),
                _project_ingress,
            )

    @property
    def _controllers(self) -> list[Controller[Any]]:
        found = [self.services, self.nodes]
        if self.ingresses is not None:
            found.append(self.ingresses)
        return found

    @property
    def has_synced(self) -> bool:
        """Every watch has its first list and handed it over."""
        return all(c.has_synced for c in self._controllers)

    async def _changed(self, key: str, obj: Any) -> None:
        # The controllers keep the projections; a change only wakes the publisher.
        self._wake.set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[ServiceSource]:
        """Run the watches and the publisher for the duration of the block."""
        async with anyio.create_task_group() as group:
            for c in self._controllers:
                group.start_soon(c.run)
            group.start_soon(self._publish_loop)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()

    async def _publish_loop(self) -> None:
        for c in self._controllers:
            await c.wait_synced()
        while True:
            self._wake = anyio.Event()
            await self.syncer.sync(self.registrations())
            self.published += 1
            await self._wake.wait()

    # -- the desired set --------------------------------------------------------------------

    def registrations(self) -> list[CatalogRegistration]:
        """The whole set the cluster's Services mean now."""
        out: list[CatalogRegistration] = []
        synced: dict[tuple[str, str], tuple[str, int]] = {}
        nodes = self.nodes.items()
        for service in self.services.items().values():
            if not self._wanted(service):
                continue
            port = self._port(service)
            if port is None:
                continue
            name = service.annotation(ANN_CATALOG_NAME) or self._derived_name(service)
            synced[(service.namespace, service.name)] = (name, port[1])
            for suffix, address, number in self._instances(service, port, nodes):
                out.append(self._registration(service, name, suffix, address, number))
        if self.ingresses is not None:
            for key, rules in sorted(self.ingresses.items().items()):
                namespace = key.split("/", 1)[0]
                for host, backend, tls in rules:
                    target = synced.get((namespace, backend))
                    if target is None:
                        continue
                    service = self.services.get(f"{namespace}/{backend}")
                    assert service is not None  # noqa: S101 - synced comes from services
                    out.append(
                        self._registration(
                            service, target[0], f"ingress/{host}", host, 443 if tls else 80
                        )
                    )
        return out

    def _wanted(self, service: _Service) -> bool:
        return (
            self.options.namespace_allowed(service.namespace)
            and self._enabled(service)
            and self._kind_synced(service)
        )

    def _enabled(self, service: _Service) -> bool:
        """The annotation decides; without one, ``default_sync`` does."""
        flag = (service.annotation(ANN_CATALOG_SYNC) or "").lower()
        if flag in ("true", "false"):
            return flag == "true"
        return self.options.default_sync

    def _kind_synced(self, service: _Service) -> bool:
        if service.type == "ClusterIP":
            return self.options.sync_cluster_ip and service.cluster_ip not in (None, "None")
        if service.type == "LoadBalancer":
            return self.options.sync_load_balancer
        return service.type == "NodePort"  # ExternalName: no address of the cluster's

    @staticmethod
    def _port(service: _Service) -> tuple[str, int, int | None] | None:
        if not service.ports:
            return None
        wanted = service.annotation(ANN_CATALOG_PORT)
        if wanted:
            for port in service.ports:
                if wanted in (port[0], str(port[1])):
                    return port
        return service.ports[0]

    def _derived_name(self, service: _Service) -> str:
        name = f"{self.options.prefix}{service.name}"
        if self.options.namespace_suffix:
            name += f"-{service.namespace}"
        return name

    def _instances(
        self,
        service: _Service,
        port: tuple[str, int, int | None],
        nodes: Mapping[str, tuple[str | None, str | None]],
    ) -> list[tuple[str, str, int]]:
        """(id suffix, address, port) of each instance of a wanted Service."""
        if service.type == "ClusterIP":
            return [("", service.cluster_ip or "", port[1])]
        if service.type == "LoadBalancer":
            return [(f"lb/{address}", address, port[1]) for address in service.ingress if address]
        node_port = port[2]
        if not node_port:
            return []
        out = []
        for node_name, (external, internal) in sorted(nodes.items()):
            mode = self.options.node_port_mode
            address = {
                "external-only": external,
                "external-first": external or internal,
                "internal-only": internal,
            }[mode]
            if address:
                out.append((f"node/{node_name}", address, int(node_port)))
        return out

    def _registration(
        self, service: _Service, name: str, suffix: str, address: str, port: int
    ) -> CatalogRegistration:
        service_id = f"{service.namespace}/{service.name}" + (f"/{suffix}" if suffix else "")
        return CatalogRegistration(
            service=name,
            service_id=service_id,
            address=address,
            port=port,
            tags=self.options.tags,
            metadata={
                "external-source": "kubernetes",
                "k8s-namespace": service.namespace,
                "k8s-service-name": service.name,
            },
            node=self.options.node,
        )


def service_sync_options(settings: Mapping[str, Any]) -> ServiceSyncOptions:
    """Options from plain settings; :class:`~pando_runtime.InvalidConfig` names each bad key."""
    known = [f.name for f in attrs.fields(ServiceSyncOptions)]
    unknown = [
        Problem(key, f"unknown setting; valid: {', '.join(known)}", "unknown")
        for key in settings
        if key not in known
    ]
    if unknown:
        raise InvalidConfig("the Service sync options are not valid", unknown)
    return ServiceSyncOptions(**settings)


@asynccontextmanager
async def open_service_source(
    settings: Mapping[str, Any], syncer: Syncer
) -> AsyncIterator[ServiceSource]:
    """The ``kubernetes`` catalog source of the command line, running while entered.

    ``settings``: ``kubeconfig`` and ``context`` (which cluster; unset: as kubectl picks)
    and any :class:`ServiceSyncOptions` field.
    """
    from ..api._clusters import ClusterSet  # noqa: PLC0415 - imports the Kubernetes client

    rest = dict(settings)
    kubeconfig, context = rest.pop("kubeconfig", None), rest.pop("context", None)
    options = service_sync_options(rest)  # checked before any file is read
    clusters = await anyio.to_thread.run_sync(lambda: ClusterSet.load(kubeconfig))
    transport = KubeTransport.for_cluster(clusters.cluster(context))
    try:
        source = ServiceSource(transport, syncer, options)
        async with source.running():
            yield source
    finally:
        transport.close()
