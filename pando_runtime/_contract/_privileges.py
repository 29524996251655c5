"""What a workload asks beyond a runtime's hardened defaults: named Linux capabilities.

Runtimes run workloads with a reduced capability set (each declares it in
``RuntimeCapabilities.default_capabilities``). A workload that needs one more, for
example ``NET_RAW`` for ``ping`` or ``NET_BIND_SERVICE`` for a port below 1024, names it in
its plan's ``privileges``; a runtime grants only what it lists in
``RuntimeCapabilities.grantable_capabilities``, and refuses the rest at plan time.
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from .._util._frozen import frozen_tuple
from ._errors import Problem

__all__ = [
    "APP_CAPABILITIES",
    "LINUX_CAPABILITIES",
    "Privileges",
    "privilege_problems",
    "ungranted",
]

LINUX_CAPABILITIES = frozenset(
    {
        "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
        "CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID",
        "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN",
        "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW",
        "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYSLOG", "SYS_ADMIN",
        "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE",
        "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM",
    }
)  # fmt: skip
"""Every Linux capability's name, as ``capabilities(7)`` spells it without ``CAP_``."""

APP_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETUID",
)
"""The hardened default set for adapters: what an ordinary app started as root needs (chown
and write its files, switch to its own user, bind a port below 1024, signal its children).
Container runtimes' defaults add ``NET_RAW`` (forged packets), ``MKNOD``, ``AUDIT_WRITE``,
``SETFCAP``, ``SETPCAP`` and ``SYS_CHROOT``, which a plan names when it needs one."""


@attrs.frozen(kw_only=True)
class Privileges:
    """What a workload needs beyond the runtime's defaults.

    ``capabilities``: Linux capabilities by name (``NET_RAW``, ``NET_BIND_SERVICE``...),
    added to the runtime's default set for this workload only.
    """

    capabilities: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)


def privilege_problems(path: str, privileges: Privileges) -> list[Problem]:
    """Every problem of ``privileges`` at ``path``: names that are no capability's, repeats."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, name in enumerate(privileges.capabilities):
        where = f"{path}.capabilities[{i}]"
        if name not in LINUX_CAPABILITIES:
            hint = f"; write {name[4:]!r}" if name.upper().startswith("CAP_") else ""
            message = f"{name!r} is not the name of a Linux capability (such as 'NET_RAW'){hint}"
            problems.append(Problem(where, message, "bad_capability"))
        elif name in seen:
            problems.append(Problem(where, f"capability {name!r} is listed twice", "duplicate"))
        seen.add(name)
    return problems


def ungranted(privileges: Privileges, grantable: Collection[str]) -> list[tuple[int, str]]:
    """The (index, name) of each capability asked for that is not in ``grantable``."""
    return [
        (i, name)
        for i, name in enumerate(privileges.capabilities)
        if name in LINUX_CAPABILITIES and name not in grantable
    ]
