"""The edge's objects: its network, its container and the labels that find them again.

An edge ``<name>`` is one container ``<owner>_edge.<name>`` (``_`` is in no owner and no
workload container's name, so it clashes with neither) on the owner's edge network
``<owner>_edge``; the adapter joins it to every bundle network. It is the only container the
adapter publishes host ports for. It carries ``<prefix>.edge-owner`` (not the owner label:
it is no workload, and the workload cache and event stream never see it), ``<prefix>.edge``
(its name), ``<prefix>.edge-volumes`` (the volume ids it mounts) and ``<prefix>.spec``, a hash
of its whole create request and of its certificates.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

from pando_runtime import CarriedFile, EdgePlan

from ._containers import LogCap, files_digest
from ._labels import Naming
from ._private import edge_bridge

__all__ = ["CERT_DIR", "EdgeNames", "EdgeRequest", "edge_network_request", "edge_request"]

CERT_DIR = "/etc/pando-edge/certs"
"""Where an edge's certificates are: ``<name>.crt`` and ``<name>.key``."""


@attrs.frozen
class EdgeNames:
    """Names and labels of one owner's edges."""

    naming: Naming

    @property
    def owner_key(self) -> str:
        """The label marking an edge's objects with their owner."""
        return f"{self.naming.prefix}.edge-owner"

    @property
    def owner_filter(self) -> str:
        """The ``label`` filter that selects this owner's edge objects."""
        return f"{self.owner_key}={self.naming.owner}"

    @property
    def name_key(self) -> str:
        """The label holding an edge's name."""
        return f"{self.naming.prefix}.edge"

    @property
    def volumes_key(self) -> str:
        """The label listing the volume ids an edge mounts (comma-separated)."""
        return f"{self.naming.prefix}.edge-volumes"

    @property
    def network(self) -> str:
        """The owner's edge network: where edges publish their ports from."""
        return f"{self.naming.owner}_edge"

    def container(self, name: str) -> str:
        """The edge's container name."""
        return f"{self.naming.owner}_edge.{name}"


@attrs.frozen
class EdgeRequest:
    """A create request of an edge container, with its spec hash and certificate files."""

    name: str
    body: dict[str, Any]
    spec: str
    files: tuple[CarriedFile, ...]


def edge_network_request(names: EdgeNames) -> dict[str, Any]:
    """The edge network: an ordinary bridge (the daemon picks its subnet)."""
    return {
        "Name": names.network,
        "Driver": "bridge",
        "CheckDuplicate": True,
        "Labels": {names.owner_key: names.naming.owner},
        # A bridge name of its own: private networks' rules name it before it exists.
        "Options": {"com.docker.network.bridge.name": edge_bridge(names.naming.owner)},
    }


def _certificate_files(plan: EdgePlan) -> tuple[CarriedFile, ...]:
    files: list[CarriedFile] = []
    for cert in plan.certificates:
        files.append(
            CarriedFile(path=f"{CERT_DIR}/{cert.name}.crt", content=cert.cert_pem.encode())
        )
        files.append(
            CarriedFile(
                path=f"{CERT_DIR}/{cert.name}.key", content=cert.key_pem.encode(), mode=0o600
            )
        )
    return tuple(files)


def edge_request(
    plan: EdgePlan, names: EdgeNames, *, log_cap: LogCap, stop_timeout: int
) -> EdgeRequest:
    """The edge container's create request: its ports published, its volumes mounted.

    ``replicas`` is not in it: one engine binds a host port once, so an edge is one
    container (restarted by the daemon unless it is stopped).
    """
    naming = names.naming
    bindings = {
        f"{p.target}/{p.protocol.value}": [{"HostPort": str(p.published)}] for p in plan.ports
    }
    host_config: dict[str, Any] = {
        "NetworkMode": names.network,
        "RestartPolicy": {"Name": "unless-stopped"},  # the runtime keeps the edge serving
        "LogConfig": {"Type": "json-file", "Config": log_cap.options()},
        "PortBindings": bindings,
    }
    if plan.mounts:
        host_config["Mounts"] = [
            {
                "Type": "volume",
                "Source": naming.volume_name(mount.volume_id),
                "Target": mount.path,
                "ReadOnly": mount.read_only,
            }
            for mount in plan.mounts
        ]
    body: dict[str, Any] = {
        "Image": plan.image,
        "Cmd": list(plan.args) or None,
        "Env": [f"{key}={value}" for key, value in sorted(plan.env.items())],
        "ExposedPorts": {key: {} for key in bindings},
        "StopTimeout": stop_timeout,
        "HostConfig": host_config,
        "NetworkingConfig": {"EndpointsConfig": {names.network: {"Aliases": [plan.name]}}},
    }
    files = _certificate_files(plan)
    data = json.dumps({"create": body, "files": files_digest(files)}, sort_keys=True)
    spec = hashlib.sha256(data.encode()).hexdigest()[:32]
    body["Labels"] = {
        names.owner_key: naming.owner,
        names.name_key: plan.name,
        names.volumes_key: ",".join(dict.fromkeys(m.volume_id for m in plan.mounts)),
        naming.spec_key: spec,
    }
    return EdgeRequest(name=names.container(plan.name), body=body, spec=spec, files=files)
