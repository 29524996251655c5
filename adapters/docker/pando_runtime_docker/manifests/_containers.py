"""A workload plan as the Engine's create request, its spec hash, and its carried files.

Pure: no I/O. The spec hash covers the whole create request (image, command, entrypoint,
working directory, env, mounts, ports, health, limits, log cap, network and alias) and the carried
files, so any change to what runs gives another hash and the workload is recreated;
``exposed`` is not part of it (who may connect changes no instance).
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import tarfile
from typing import Any

import attrs

from pando_runtime import BundlePlan, CarriedFile, HealthCheck, WorkloadPlan
from pando_runtime.plugin import APP_CAPABILITIES

from ._labels import Naming

__all__ = [
    "GRANTABLE_CAPABILITIES",
    "ContainerRequest",
    "LogCap",
    "container_request",
    "files_digest",
    "files_tar",
    "hardening",
    "health_test",
]

_NANOS = 1_000_000_000

GRANTABLE_CAPABILITIES = (
    *APP_CAPABILITIES,
    "AUDIT_WRITE",
    "MKNOD",
    "NET_RAW",
    "SETFCAP",
    "SETPCAP",
    "SYS_CHROOT",
)
"""What a plan may ask for: the Engine's own default set (a container held it all before)."""


def hardening(added: tuple[str, ...] = ()) -> dict[str, Any]:
    """``HostConfig`` keys every workload gets: the app capabilities and ``added`` only.

    Every other capability is dropped (``APP_CAPABILITIES`` are added back) and no process
    may gain privileges (``no_new_privs``). The Engine's default seccomp profile applies
    unless a request turns it off; none does.
    """
    return {
        "CapDrop": ["ALL"],
        "CapAdd": sorted({*APP_CAPABILITIES, *added}),
        "SecurityOpt": ["no-new-privileges"],
    }


@attrs.frozen(kw_only=True)
class LogCap:
    """The json-file log cap: ``max_bytes`` in all, split over ``files`` files."""

    max_bytes: int
    files: int

    def options(self) -> dict[str, str]:
        """The log driver's options."""
        per_file = max(self.max_bytes // self.files, 1024)
        return {"max-size": str(per_file), "max-file": str(self.files)}


@attrs.frozen(kw_only=True)
class ContainerRequest:
    """What ``POST /containers/create`` gets for one workload, and the files put in after."""

    name: str
    body: dict[str, Any] = attrs.field(repr=False)
    spec: str
    files: tuple[CarriedFile, ...] = ()


def health_test(health: HealthCheck) -> dict[str, Any]:
    """The Engine's health check for a plan's (command checks only: see check rules)."""
    return {
        "Test": ["CMD", *health.command],
        "Interval": int(health.interval_seconds * _NANOS),
        "Timeout": int(health.timeout_seconds * _NANOS),
        "Retries": health.retries,
    }


def files_digest(files: tuple[CarriedFile, ...]) -> str:
    """SHA-256 over the files' paths, modes and contents (order-independent)."""
    digest = hashlib.sha256()
    for file in sorted(files, key=lambda f: f.path):
        digest.update(file.path.encode() + b"\0")
        digest.update(f"{file.mode:o}".encode() + b"\0")
        digest.update(hashlib.sha256(file.content).digest())
    return digest.hexdigest()


def files_tar(files: tuple[CarriedFile, ...]) -> bytes:
    """A tar of ``files`` rooted at ``/``, with every parent directory as an entry.

    The daemon does not create missing parents when it extracts an archive.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for file in sorted(files, key=lambda f: f.path):
            relative = file.path.lstrip("/")
            parent = posixpath.dirname(relative)
            parents: list[str] = []
            while parent and parent not in made:
                parents.append(parent)
                parent = posixpath.dirname(parent)
            for directory in reversed(parents):
                info = tarfile.TarInfo(directory)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                made.add(directory)
            info = tarfile.TarInfo(relative)
            info.size = len(file.content)
            info.mode = file.mode
            tar.addfile(info, io.BytesIO(file.content))
    return buffer.getvalue()


def container_request(
    plan: BundlePlan,
    workload: WorkloadPlan,
    naming: Naming,
    *,
    log_cap: LogCap,
    stop_timeout: int,
    pids_limit: int,
    dns: tuple[str, ...] = (),
    runtime: str | None = None,
) -> ContainerRequest:
    """The create request of ``workload``; its labels carry the spec hash.

    ``runtime``: the OCI runtime to run it under (``None``: the daemon's default); part of
    the spec, so a change of runtime recreates the workload.

    ``workload.log_bytes`` overrides ``log_cap.max_bytes``. Secret values are in ``Env``
    only: never in a label.
    """
    network = naming.network_name(plan.bundle_id)
    cap = attrs.evolve(log_cap, max_bytes=workload.log_bytes) if workload.log_bytes else log_cap
    host_config: dict[str, Any] = {
        "NetworkMode": network,
        "RestartPolicy": {"Name": "no"},  # the host owns restarts
        "LogConfig": {"Type": "json-file", "Config": cap.options()},
        **hardening(workload.privileges.capabilities),
    }
    if workload.resources.memory_bytes is not None:
        host_config["Memory"] = workload.resources.memory_bytes
        host_config["MemorySwap"] = workload.resources.memory_bytes  # no swap beyond it
    if workload.resources.cpu_millis is not None:
        host_config["NanoCpus"] = workload.resources.cpu_millis * 1_000_000
    if workload.mounts:
        host_config["Mounts"] = [
            {
                "Type": "volume",
                "Source": naming.volume_name(mount.volume_id),
                "Target": mount.path,
                "ReadOnly": mount.read_only,
            }
            for mount in workload.mounts
        ]
    if pids_limit:
        host_config["PidsLimit"] = pids_limit
    if runtime is not None:
        host_config["Runtime"] = runtime
    if dns:  # the embedded DNS's upstream (restricted egress: see manifests._gateway)
        host_config["Dns"] = list(dns)
    body: dict[str, Any] = {
        "Image": workload.image,
        "Cmd": list(workload.command) or None,
        "Entrypoint": list(workload.entrypoint) or None,
        "WorkingDir": workload.working_dir or "",
        "Env": [f"{key}={value}" for key, value in sorted(workload.env.items())],
        "ExposedPorts": {f"{p.number}/{p.protocol.value}": {} for p in workload.ports},
        "StopTimeout": stop_timeout,
        "HostConfig": host_config,
        "NetworkingConfig": {"EndpointsConfig": {network: {"Aliases": [workload.name]}}},
    }
    if workload.health is not None:
        body["Healthcheck"] = health_test(workload.health)
    spec = _spec_hash(body, workload.files)
    body["Labels"] = {
        **naming.bundle_labels(plan.bundle_id),
        naming.workload_key: workload.name,
        naming.spec_key: spec,
    }
    return ContainerRequest(
        name=naming.container_name(plan.bundle_id, workload.name),
        body=body,
        spec=spec,
        files=workload.files,
    )


def _spec_hash(body: dict[str, Any], files: tuple[CarriedFile, ...]) -> str:
    data = json.dumps({"create": body, "files": files_digest(files)}, sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:32]
