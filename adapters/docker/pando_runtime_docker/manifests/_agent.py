"""The agent's objects: its network, its locked-down container and the files it is given.

One agent per owner on an engine: the container ``<owner>_agent`` on its own network
``<owner>-agent``, joined to every bundle network of the owner, publishing one port. Its
network's name sorts before every bundle network's (``-`` before ``.``): Docker routes a
container with several networks through the first by name, and moves its published port
there, so the port stays on the agent's own network as bundles come and go. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from typing import Any

import attrs

from ._containers import LogCap
from ._labels import Naming

__all__ = [
    "AGENT_DIR",
    "AGENT_PORT",
    "AGENT_USER",
    "AgentNames",
    "AgentRequest",
    "agent_files",
    "agent_network_request",
    "agent_request",
    "dial_line",
]

AGENT_PORT = 7443
"""The port the agent listens on inside its container."""
AGENT_DIR = "/etc/pando-agent"
"""An anonymous volume (the root is read-only) holding ``agent.pem`` and ``clients.pem``."""
AGENT_USER = 65534
"""The agent runs as nobody; its files are given to that user."""
_MEMORY = 64 * 1024**2
_NANO_CPUS = 500_000_000
_PIDS = 64
_LOG_BYTES = 1024**2


@attrs.frozen
class AgentNames:
    """Names and labels of one owner's agent."""

    naming: Naming

    @property
    def owner_key(self) -> str:
        """The label marking the agent's container and network with their owner.

        Not the owner label: the agent is no workload, and never shows in observe or events.
        """
        return f"{self.naming.prefix}.agent-owner"

    @property
    def owner_filter(self) -> str:
        """The ``label`` filter that selects this owner's agent objects."""
        return f"{self.owner_key}={self.naming.owner}"

    @property
    def container(self) -> str:
        """The agent's container (``_`` is in no owner and no workload container's name)."""
        return f"{self.naming.owner}_agent"

    @property
    def network(self) -> str:
        """The agent's own network, where its port is published from."""
        return f"{self.naming.owner}-agent"


@attrs.frozen(kw_only=True)
class AgentRequest:
    """A create request of the agent's container and its spec hash."""

    name: str
    body: dict[str, Any] = attrs.field(repr=False)
    spec: str


def agent_network_request(names: AgentNames) -> dict[str, Any]:
    """The agent's network: an ordinary bridge.

    The daemon picks its subnet, outside the app pool: no app is ever on it.
    """
    return {
        "Name": names.network,
        "Driver": "bridge",
        "CheckDuplicate": True,
        "Labels": {names.owner_key: names.naming.owner},
    }


def agent_request(names: AgentNames, *, image: str, pool: str, published_port: int) -> AgentRequest:
    """The agent's container: read-only root, no capability, small limits, one port.

    Its credentials are not in the request (they are files, written into its volume), so
    renewing them changes nothing here and needs no new container.
    """
    port = f"{AGENT_PORT}/tcp"
    host_config: dict[str, Any] = {
        "NetworkMode": names.network,
        "PortBindings": {port: [{"HostPort": str(published_port)}]},
        "RestartPolicy": {"Name": "unless-stopped"},  # the engine keeps it serving
        "ReadonlyRootfs": True,
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"],
        "Memory": _MEMORY,
        "MemorySwap": _MEMORY,
        "NanoCpus": _NANO_CPUS,
        "PidsLimit": _PIDS,
        "LogConfig": {
            "Type": "json-file",
            "Config": LogCap(max_bytes=_LOG_BYTES, files=2).options(),
        },
    }
    body: dict[str, Any] = {
        "Image": image,
        "Cmd": ["-listen", f":{AGENT_PORT}", "-dir", AGENT_DIR, "-pool", pool],
        "User": f"{AGENT_USER}:{AGENT_USER}",
        "ExposedPorts": {port: {}},
        "Volumes": {AGENT_DIR: {}},
        "HostConfig": host_config,
    }
    data = json.dumps(body, sort_keys=True)
    spec = hashlib.sha256(data.encode()).hexdigest()[:32]
    body["Labels"] = {names.owner_key: names.naming.owner, names.naming.spec_key: spec}
    return AgentRequest(name=names.container, body=body, spec=spec)


def agent_files(cert_pem: str, key_pem: str, clients_pem: str) -> bytes:
    """The tar put into the agent's volume.

    ``agent.pem`` holds its certificate and key, readable by the agent alone; ``clients.pem``
    the authorities whose clients it accepts.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, text, mode in (
            ("agent.pem", cert_pem.rstrip("\n") + "\n" + key_pem, 0o400),
            ("clients.pem", clients_pem, 0o444),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            info.uid = info.gid = AGENT_USER
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def dial_line(container: str, port: int) -> str:
    """The first line a host sends: the workload's container name and the port.

    The agent resolves the name through the engine's DNS, on the networks it is joined to.
    """
    return f"DIAL {container} {port}"
