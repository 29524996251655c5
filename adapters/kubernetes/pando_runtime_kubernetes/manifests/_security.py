"""The security settings of every pod the adapter writes in an app's namespace.

Every pod asks for the container runtime's default seccomp profile; every container drops
every capability, adds back :data:`DEFAULT_CAPABILITIES` (what an ordinary app started as
root needs: chown its files, switch to its own user, bind a low port, signal its children)
and may not gain privileges (``no_new_privs``). A workload's ``privileges.capabilities`` adds
to that set, within :data:`GRANTABLE_CAPABILITIES`: Pod Security's ``baseline`` level (set on
every app namespace) and the admission backstop refuse any other. ``NET_RAW`` is not among
them: a pod could forge packets on its node's bridge. See ``docs/security.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pando_runtime.plugin import APP_CAPABILITIES

__all__ = [
    "DEFAULT_CAPABILITIES",
    "GRANTABLE_CAPABILITIES",
    "container_security",
    "pod_security",
]

DEFAULT_CAPABILITIES = APP_CAPABILITIES
"""What every app container holds (when it runs as root; a non-root process holds none)."""

GRANTABLE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
"""What a plan may ask for: what Pod Security's ``baseline`` level lets a container add."""


def pod_security() -> dict[str, Any]:
    """A pod's ``securityContext``: the runtime's default seccomp profile."""
    return {"seccompProfile": {"type": "RuntimeDefault"}}


def container_security(added: Iterable[str] = ()) -> dict[str, Any]:
    """A container's ``securityContext``: only the default capabilities and ``added``.

    No privilege escalation, never privileged.
    """
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"], "add": sorted({*DEFAULT_CAPABILITIES, *added})},
    }
