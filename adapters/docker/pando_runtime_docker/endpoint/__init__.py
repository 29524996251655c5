"""Which engine, and how it is reached: addresses, contexts, TLS and SSH (private).

Below ``api``: the transport takes an :class:`EngineLink` made from the :class:`Endpoint`
that :func:`resolve_endpoint` reads from the settings and Docker's environment.
"""

from ._contexts import DockerContext, config_dir, current_context
from ._errors import refused
from ._link import EngineLink
from ._resolve import Endpoint, resolve_endpoint
from ._ssh import SshTunnel
from ._ssh_target import HostKey, SshTarget

__all__ = [
    "DockerContext",
    "Endpoint",
    "EngineLink",
    "HostKey",
    "SshTarget",
    "SshTunnel",
    "config_dir",
    "current_context",
    "refused",
    "resolve_endpoint",
]
