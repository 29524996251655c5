"""A real Docker Engine for tests: dockerd (Debian's ``docker.io``, 20.10, API 1.41) in
network namespaces the harness makes, with a stand-in outside world beside it, and images
built offline from Debian's busybox.

From Python::

    from localdocker import DockerEngine
    with DockerEngine(work_dir) as engine:
        engine.docker("run", "--rm", engine.busybox, "echo", "hi")

From a shell (as root): ``PYTHONPATH=tests/support python -m localdocker`` prints
``DOCKER_HOST=...`` and runs until Ctrl-C. The pytest plugin is
:mod:`localdocker.pytest_plugin` (fixture ``docker_engine``). How the
engine is isolated, and what it changes on the host and undoes: ``docs/local-docker.md``.
"""

from __future__ import annotations

from .api import DockerApi, DockerApiError, Response
from .engine import DockerEngine, EngineError, docker_cli
from .hostside import HostNamespace, run_in
from .images import (
    AGENT,
    BUSYBOX,
    IPTABLES,
    SQUID,
    BuiltImage,
    agent_image,
    build_image,
    busybox_image,
    iptables_image,
    squid_image,
)
from .network import EngineNetwork, Outside
from .outside import PAGE, Reach
from .requirements import missing

__all__ = [
    "AGENT",
    "BUSYBOX",
    "IPTABLES",
    "PAGE",
    "SQUID",
    "BuiltImage",
    "DockerApi",
    "DockerApiError",
    "DockerEngine",
    "EngineError",
    "EngineNetwork",
    "HostNamespace",
    "Outside",
    "Reach",
    "Response",
    "agent_image",
    "build_image",
    "busybox_image",
    "docker_cli",
    "iptables_image",
    "missing",
    "run_in",
    "squid_image",
]
