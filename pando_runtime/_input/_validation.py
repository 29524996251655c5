"""Plan validation: every problem of a plan, each with its path, before anything is written.

``validate_plan`` checks the rules every runtime shares; given the adapter's
capabilities it also lists what this runtime cannot do. ``check_plan`` raises:
:class:`InvalidPlan` for a badly formed plan, :class:`CapabilityUnsupported`
for a well-formed plan this runtime cannot run.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from datetime import datetime

from .._contract._capabilities import Capability, IsolationClass, RuntimeCapabilities
from .._contract._edge import EdgePlan
from .._contract._errors import CapabilityUnsupported, InvalidInput, InvalidPlan, Problem
from .._contract._exec import ExecRequest
from .._contract._plans import BundlePlan, EgressPolicy, HealthCheck, Resources, WorkloadPlan
from .._contract._privileges import privilege_problems, ungranted
from .._contract._trial import TrialRequest
from .._contract._volumes import VolumeRequest

__all__ = [
    "CAPABILITY_PROBLEM",
    "MAX_CARRIED_FILES_BYTES",
    "check_not_before",
    "check_plan",
    "is_valid_image",
    "validate_edge",
    "validate_plan",
    "validate_trial",
    "validate_volume_request",
]

MAX_CARRIED_FILES_BYTES = 1024 * 1024
"""Carried files of one workload may hold this many bytes in all (1 MiB)."""


def carried_file_too_large(path: str, size: int) -> str:
    """Why a carried file at ``path`` holding ``size`` bytes is refused."""
    return (
        f"file {path!r} holds {size} bytes; the carried files of a workload "
        f"may hold {MAX_CARRIED_FILES_BYTES} bytes (1 MiB) in all"
    )


CAPABILITY_PROBLEM = "capability_unsupported"
"""The ``code`` of a problem that names a capability the runtime lacks."""

_DNS_LABEL = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_ID = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]{0,46}[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$"
)
_MAX_IMAGE_LENGTH = 255
_HOST_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_MAX_HOST_LENGTH = 253
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
# An OCI reference: [registry[:port]/]path[:tag][@algorithm:hex]
_IMAGE = re.compile(
    r"^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def is_valid_image(reference: str) -> bool:
    """Whether ``reference`` is a well-formed image reference (``registry/path:tag@digest``)."""
    return len(reference) <= _MAX_IMAGE_LENGTH and bool(_IMAGE.match(reference))


class _Collector:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, message: str, code: str = "invalid") -> None:
        self.problems.append(Problem(path, message, code))

    def dns_label(self, path: str, value: str, what: str) -> None:
        if not _DNS_LABEL.match(value):
            self.add(
                path,
                f"{what} {value!r} must be 1-63 lowercase letters, digits or '-', "
                "starting with a letter and ending with a letter or digit",
                "bad_name",
            )

    def identifier(self, path: str, value: str, what: str) -> None:
        if not _ID.match(value):
            self.add(
                path,
                f"{what} {value!r} must be 1-48 letters, digits, '_' or '-', "
                "starting and ending with a letter or digit",
                "bad_name",
            )

    def absolute_path(self, path: str, value: str) -> None:
        if not value.startswith("/"):
            self.add(path, f"path {value!r} must be absolute", "bad_path")
        elif "\0" in value or any(part == ".." for part in value.split("/")):
            self.add(path, f"path {value!r} must not contain '..' or NUL", "bad_path")

    def image(self, path: str, value: str) -> None:
        if not is_valid_image(value):
            self.add(path, f"image {value!r} is not a valid image reference", "bad_image")

    def env(self, path: str, env: Iterable[str]) -> None:
        for name in env:
            if not _ENV_NAME.match(name):
                self.add(
                    f"{path}[{name!r}]",
                    f"environment variable name {name!r} must be letters, digits "
                    "and '_', not starting with a digit",
                    "bad_env",
                )

    def positive(self, path: str, value: float | None, what: str) -> None:
        if value is not None and value <= 0:
            self.add(path, f"{what} must be positive, got {value}", "not_positive")

    def unsupported(self, path: str, capability: Capability, message: str) -> None:
        self.problems.append(
            Problem(
                path,
                f"{message}; this runtime lacks {capability.value!r}",
                CAPABILITY_PROBLEM,
                capability.value,
            )
        )


def _resources(c: _Collector, path: str, resources: Resources) -> None:
    c.positive(f"{path}.cpu_millis", resources.cpu_millis, "cpu_millis")
    c.positive(f"{path}.memory_bytes", resources.memory_bytes, "memory_bytes")


def _health(c: _Collector, path: str, health: HealthCheck, ports: set[int]) -> None:
    if bool(health.command) == bool(health.http_path):
        c.add(path, "set exactly one of 'command' and 'http_path'", "bad_health")
    if health.http_path is not None:
        if not health.http_path.startswith("/"):
            c.add(f"{path}.http_path", "http_path must start with '/'", "bad_health")
        if health.port is None:
            c.add(f"{path}.port", "an HTTP health check needs a port", "bad_health")
        elif health.port not in ports:
            c.add(
                f"{path}.port",
                f"port {health.port} is not one of the workload's ports",
                "bad_health",
            )
    c.positive(f"{path}.interval_seconds", health.interval_seconds, "interval_seconds")
    c.positive(f"{path}.timeout_seconds", health.timeout_seconds, "timeout_seconds")
    if health.retries < 1:
        c.add(f"{path}.retries", "retries must be at least 1", "not_positive")


def _ports(c: _Collector, path: str, w: WorkloadPlan) -> None:
    seen: set[tuple[int, str]] = set()
    for i, port in enumerate(w.ports):
        if not 1 <= port.number <= 65535:  # noqa: PLR2004 - the TCP/UDP port range
            c.add(f"{path}.ports[{i}].number", f"port {port.number} is not in 1-65535", "bad_port")
        key = (port.number, port.protocol.value)
        if key in seen:
            c.add(
                f"{path}.ports[{i}]",
                f"port {port.number}/{port.protocol} is listed twice",
                "duplicate",
            )
        seen.add(key)


def _paths(c: _Collector, path: str, w: WorkloadPlan, volume_ids: set[str]) -> None:
    """Mount points and carried files: absolute, each place used once, files within the limit."""
    taken: dict[str, str] = {}

    def claim(where: str, place: str) -> None:
        c.absolute_path(f"{where}.path", place)
        if place in taken:
            c.add(f"{where}.path", f"{place!r} is already used by {taken[place]}", "duplicate")
        taken.setdefault(place, where)

    for i, mount in enumerate(w.mounts):
        if mount.volume_id not in volume_ids:
            c.add(
                f"{path}.mounts[{i}].volume_id",
                f"volume {mount.volume_id!r} is not declared in the plan's volumes",
                "unknown_volume",
            )
        claim(f"{path}.mounts[{i}]", mount.path)
    total = 0
    for i, carried in enumerate(w.files):
        claim(f"{path}.files[{i}]", carried.path)
        if not 0 <= carried.mode <= 0o7777:  # noqa: PLR2004 - permission bits
            c.add(
                f"{path}.files[{i}].mode", f"mode {carried.mode:o} is not a file mode", "bad_mode"
            )
        total += len(carried.content)
        if len(carried.content) > MAX_CARRIED_FILES_BYTES:
            c.add(
                f"{path}.files[{i}].content",
                carried_file_too_large(carried.path, len(carried.content)),
                "too_large",
            )
    # A file too large alone is named; the total is only news when each file fits.
    if total > MAX_CARRIED_FILES_BYTES and max(len(f.content) for f in w.files) <= (
        MAX_CARRIED_FILES_BYTES
    ):
        c.add(
            f"{path}.files",
            f"carried files hold {total} bytes; the limit is {MAX_CARRIED_FILES_BYTES}",
            "too_large",
        )


def _workload(c: _Collector, path: str, w: WorkloadPlan, volume_ids: set[str]) -> None:
    c.dns_label(f"{path}.name", w.name, "workload name")
    c.image(f"{path}.image", w.image)
    if w.working_dir is not None:
        c.absolute_path(f"{path}.working_dir", w.working_dir)
    c.env(f"{path}.env", w.env)
    _ports(c, path, w)
    _paths(c, path, w, volume_ids)
    if w.health is not None:
        _health(c, f"{path}.health", w.health, {p.number for p in w.ports})
    _resources(c, f"{path}.resources", w.resources)
    c.positive(f"{path}.log_bytes", w.log_bytes, "log_bytes")
    if w.pull_auth is not None and not w.pull_auth.registry:
        c.add(f"{path}.pull_auth.registry", "registry must not be empty", "missing")
    c.problems += privilege_problems(f"{path}.privileges", w.privileges)


def _dependencies(c: _Collector, plan: BundlePlan) -> None:
    names = {w.name for w in plan.workloads}
    for i, w in enumerate(plan.workloads):
        for j, dep in enumerate(w.depends_on):
            if dep == w.name:
                c.add(
                    f"workloads[{i}].depends_on[{j}]", "a workload cannot depend on itself", "cycle"
                )
            elif dep not in names:
                c.add(
                    f"workloads[{i}].depends_on[{j}]",
                    f"no workload is named {dep!r}",
                    "unknown_workload",
                )
    _cycles(c, plan, names)


def _cycles(c: _Collector, plan: BundlePlan, names: set[str]) -> None:
    """Report each dependency cycle once, at the workload where the search closes it."""
    graph = {
        w.name: [d for d in w.depends_on if d in names and d != w.name] for w in plan.workloads
    }
    index = {w.name: i for i, w in enumerate(plan.workloads)}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for dep in graph[name]:
            if state.get(dep) == 1:
                cycle = [*trail[trail.index(dep) :], dep]
                c.add(
                    f"workloads[{index[name]}].depends_on",
                    f"dependency cycle: {' -> '.join(cycle)}",
                    "cycle",
                )
            elif dep not in state:
                visit(dep, [*trail, dep])
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])


def _isolation_short(floor: IsolationClass, caps: RuntimeCapabilities) -> str:
    return (
        f"it must run {floor.name.lower()} at least; the strongest isolation here is "
        f"{caps.isolation_class.name.lower()}"
    )


def _capabilities(c: _Collector, plan: BundlePlan, caps: RuntimeCapabilities) -> None:
    count = len(plan.workloads)
    if count > 1 and not caps.multiple_workloads:
        c.unsupported(
            "workloads",
            Capability.MULTIPLE_WORKLOADS,
            f"the plan has {count} workloads; this runtime runs one per bundle",
        )
    if caps.max_workloads_per_bundle and count > caps.max_workloads_per_bundle:
        c.unsupported(
            "workloads",
            Capability.MULTIPLE_WORKLOADS,
            f"the plan has {count} workloads; this runtime allows {caps.max_workloads_per_bundle}",
        )
    if plan.isolation > caps.isolation_class:
        c.unsupported(
            "isolation",
            Capability.ISOLATION_CLASS,
            _isolation_short(plan.isolation, caps),
        )
    if plan.volumes and not caps.persistent_volumes:
        c.unsupported("volumes", Capability.PERSISTENT_VOLUMES, "the plan declares volumes")
    _egress_capabilities(c, "network.egress", plan.network.egress, caps)
    for i, w in enumerate(plan.workloads):
        if w.files and not caps.carried_files:
            c.unsupported(
                f"workloads[{i}].files", Capability.CARRIED_FILES, "the workload carries files"
            )
        limited = w.resources.cpu_millis is not None or w.resources.memory_bytes is not None
        if limited and not caps.resource_limits:
            c.unsupported(
                f"workloads[{i}].resources",
                Capability.RESOURCE_LIMITS,
                "the workload sets resource limits",
            )
        if w.log_bytes is not None and not caps.log_retention.supports_size_cap:
            c.unsupported(
                f"workloads[{i}].log_bytes",
                Capability.LOG_SIZE_CAP,
                "the workload caps its log size",
            )
        granted = ", ".join(sorted(caps.grantable_capabilities)) or "none"
        for j, name in ungranted(w.privileges, caps.grantable_capabilities):
            c.unsupported(
                f"workloads[{i}].privileges.capabilities[{j}]",
                Capability.GRANTABLE_CAPABILITIES,
                f"the workload asks for {name!r}, which this runtime does not grant ({granted})",
            )


def _host_name_problem(name: str) -> str | None:
    """Why ``name`` is not a host name an egress rule may allow, or ``None``."""
    labels = name.split(".")
    if len(name) > _MAX_HOST_LENGTH or not all(_HOST_LABEL.match(label) for label in labels):
        return (
            f"{name!r} is neither a CIDR block nor a host name (lowercase labels of letters, "
            "digits and '-', joined by '.')"
        )
    if len(labels) < 2 or labels[-1].isdigit():  # noqa: PLR2004 - a name and a top-level domain
        return f"{name!r} must be a fully qualified host name such as 'api.example.com'"
    return None


def _egress_rules(c: _Collector, path: str, egress: EgressPolicy) -> None:
    """Each rule allows a CIDR block (host bits clear) or a fully qualified host name."""
    for i, rule in enumerate(egress.allow):
        where = f"{path}.allow[{i}]"
        if not rule.destination:
            c.add(f"{where}.destination", "destination must not be empty", "missing")
        elif rule.is_cidr:
            try:
                ipaddress.ip_network(rule.destination)
            except ValueError:
                c.add(
                    f"{where}.destination",
                    f"CIDR block {rule.destination!r} has host bits set",
                    "bad_destination",
                )
        else:
            problem = _host_name_problem(rule.destination)
            if problem is not None:
                c.add(f"{where}.destination", problem, "bad_destination")
        for j, port in enumerate(rule.ports):
            if not 1 <= port <= 65535:  # noqa: PLR2004 - the TCP/UDP port range
                c.add(f"{where}.ports[{j}]", f"port {port} is not in 1-65535", "bad_port")


def _egress_capabilities(
    c: _Collector, path: str, egress: EgressPolicy | None, caps: RuntimeCapabilities
) -> None:
    """Restricted egress needs ``egress_restriction``; host-name rules ``egress_host_names``."""
    if egress is None:
        return
    if not caps.egress_restriction:
        c.unsupported(path, Capability.EGRESS_RESTRICTION, "outbound traffic is restricted")
        return
    for i, rule in enumerate(egress.allow):
        if rule.destination and not rule.is_cidr and not caps.egress_host_names:
            c.unsupported(
                f"{path}.allow[{i}].destination",
                Capability.EGRESS_HOST_NAMES,
                f"the rule allows the host name {rule.destination!r}",
            )


def _network(c: _Collector, plan: BundlePlan) -> None:
    if not plan.network.private:
        c.add("network.private", "bundles are always private; set private to true", "not_private")
    if plan.network.egress is not None:
        _egress_rules(c, "network.egress", plan.network.egress)


def _labels(c: _Collector, plan: BundlePlan) -> None:
    for key, value in plan.labels.items():
        if not _LABEL_KEY.match(key):
            c.add(f"labels[{key!r}]", f"label key {key!r} is not valid", "bad_label")
        if not _LABEL_VALUE.match(value):
            c.add(
                f"labels[{key!r}]",
                f"label value {value!r} must be at most 63 letters, digits, '-', '_' or '.'",
                "bad_label",
            )


def _volumes(c: _Collector, plan: BundlePlan) -> set[str]:
    volume_ids: set[str] = set()
    for i, volume in enumerate(plan.volumes):
        c.identifier(f"volumes[{i}].volume_id", volume.volume_id, "volume id")
        if volume.volume_id in volume_ids:
            c.add(
                f"volumes[{i}].volume_id",
                f"volume {volume.volume_id!r} is declared twice",
                "duplicate",
            )
        volume_ids.add(volume.volume_id)
        if not volume.name:
            c.add(f"volumes[{i}].name", "name must not be empty", "missing")
        c.positive(f"volumes[{i}].size_bytes", volume.size_bytes, "size_bytes")
    return volume_ids


def validate_plan(
    plan: BundlePlan, capabilities: RuntimeCapabilities | None = None
) -> list[Problem]:
    """Every problem of ``plan``, each with its path; empty when the plan is good.

    With ``capabilities``, also every part of the plan this runtime cannot run
    (those problems have the code :data:`CAPABILITY_PROBLEM`).
    """
    c = _Collector()
    c.identifier("bundle_id", plan.bundle_id, "bundle id")
    if not plan.workloads:
        c.add("workloads", "a bundle needs at least one workload", "missing")
    _network(c, plan)
    _labels(c, plan)
    volume_ids = _volumes(c, plan)
    names: set[str] = set()
    for i, workload in enumerate(plan.workloads):
        if workload.name in names:
            c.add(
                f"workloads[{i}].name",
                f"workload name {workload.name!r} is used twice",
                "duplicate",
            )
        names.add(workload.name)
        _workload(c, f"workloads[{i}]", workload, volume_ids)
    _dependencies(c, plan)
    if capabilities is not None:
        _capabilities(c, plan, capabilities)
    return c.problems


def check_plan(plan: BundlePlan, capabilities: RuntimeCapabilities | None = None) -> None:
    """Raise unless ``plan`` is good (and, given ``capabilities``, runnable here).

    Raises:
        InvalidPlan: the plan is badly formed; every problem is listed.
        CapabilityUnsupported: the plan is good but needs what this runtime lacks.
    """
    problems = validate_plan(plan, capabilities)
    _raise(problems, f"plan for bundle {plan.bundle_id!r}")


def _raise(problems: list[Problem], what: str) -> None:
    formed = [p for p in problems if p.code != CAPABILITY_PROBLEM]
    if formed:
        raise InvalidPlan(f"{what} is not valid", problems)
    if problems:
        raise CapabilityUnsupported(
            problems[0].capability or "unknown",
            f"{what} needs what this runtime cannot do: " + "; ".join(str(p) for p in problems),
            details={
                "problems": [
                    {"path": p.path, "message": p.message, "capability": p.capability}
                    for p in problems
                ]
            },
        )


def validate_volume_request(request: VolumeRequest) -> list[Problem]:
    """Every problem of a volume request."""
    c = _Collector()
    c.identifier("volume_id", request.volume_id, "volume id")
    c.identifier("bundle_id", request.bundle_id, "bundle id")
    if not request.name:
        c.add("name", "name must not be empty", "missing")
    c.positive("size_bytes", request.size_bytes, "size_bytes")
    return c.problems


def validate_trial(
    request: TrialRequest, capabilities: RuntimeCapabilities | None = None
) -> list[Problem]:
    """Every problem of a trial request (given ``capabilities``, what this runtime lacks too)."""
    c = _Collector()
    c.identifier("trial_id", request.trial_id, "trial id")
    c.image("image", request.image)
    c.env("env", request.env)
    if request.working_dir is not None:
        c.absolute_path("working_dir", request.working_dir)
    for i, declared in enumerate(request.declared_paths):
        c.absolute_path(f"declared_paths[{i}]", declared)
    c.positive("timeout_seconds", request.timeout_seconds, "timeout_seconds")
    if request.egress is not None:
        _egress_rules(c, "egress", request.egress)
    if capabilities is not None:
        _egress_capabilities(c, "egress", request.egress, capabilities)
        if request.isolation_floor > capabilities.isolation_class:
            c.unsupported(
                "isolation_floor",
                Capability.ISOLATION_CLASS,
                _isolation_short(request.isolation_floor, capabilities),
            )
    return c.problems


def validate_exec_request(request: ExecRequest) -> list[Problem]:
    """Every problem of an exec request: a command is needed, environment names must be valid."""
    c = _Collector()
    if not request.command:
        c.add("command", "an exec request needs a command", "missing")
    c.env("env", request.env)
    return c.problems


def validate_edge(plan: EdgePlan) -> list[Problem]:
    """Every problem of an edge plan."""
    c = _Collector()
    c.dns_label("name", plan.name, "edge name")
    c.image("image", plan.image)
    c.env("env", plan.env)
    if plan.replicas < 1:
        c.add("replicas", "an edge needs at least one replica", "not_positive")
    published: set[int] = set()
    for i, port in enumerate(plan.ports):
        for field, number in (("published", port.published), ("target", port.target)):
            if not 1 <= number <= 65535:  # noqa: PLR2004
                c.add(f"ports[{i}].{field}", f"port {number} is not in 1-65535", "bad_port")
        if port.published in published:
            c.add(f"ports[{i}].published", f"port {port.published} is published twice", "duplicate")
        published.add(port.published)
    for i, mount in enumerate(plan.mounts):
        c.absolute_path(f"mounts[{i}].path", mount.path)
        c.identifier(f"mounts[{i}].volume_id", mount.volume_id, "volume id")
    names: set[str] = set()
    for i, cert in enumerate(plan.certificates):
        if cert.name in names:
            c.add(
                f"certificates[{i}].name", f"certificate {cert.name!r} is listed twice", "duplicate"
            )
        names.add(cert.name)
        if "BEGIN" not in cert.cert_pem or "BEGIN" not in cert.key_pem:
            c.add(f"certificates[{i}]", "cert_pem and key_pem must be PEM text", "bad_pem")
    return c.problems


def raise_problems(problems: list[Problem], what: str) -> None:
    """Raise :class:`InvalidPlan` (or :class:`CapabilityUnsupported`) when ``problems`` exist."""
    _raise(problems, what)


def check_not_before(not_before: object) -> None:
    """Refuse an ``observe(..., not_before=...)`` that is not ``None`` or an aware datetime.

    A naive datetime cannot be compared with the runtime's confirmations (they are UTC),
    and a string or a number is no instant at all; either would fail deep inside a read.

    Raises:
        InvalidInput: naming ``not_before``, what it must be, and what it was.
    """
    if not_before is None:
        return
    if isinstance(not_before, datetime):
        if not_before.utcoffset() is not None:
            return
        got, code = f"a naive datetime ({not_before.isoformat()}, no timezone)", "no_timezone"
    else:
        got, code = f"a {type(not_before).__name__}", "wrong_type"
    raise InvalidInput(
        "observe's 'not_before' is not valid",
        [Problem("not_before", f"must be a timezone-aware datetime, got {got}", code)],
        remedy=(
            "Pass a timezone-aware datetime (for example datetime.now(UTC), or a "
            "confirmed_at an earlier observe returned), or None to answer at once; "
            "nothing was read."
        ),
        details={"parameter": "not_before"},
    )
