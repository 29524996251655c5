"""Which Docker Engine the harness runs: Debian's (``docker.io``, 20.10, API 1.41) or the
current one ``tools/docker/build.sh`` builds from its Go module (28.5, API 1.51).

Both run on Debian's containerd and runc. The built engine's ``docker-proxy`` is named to its
daemon (a proxy of another release does not work with it); its binaries come from
``$PANDO_DOCKER_BIN`` (the test command builds them), else from the build script (built once,
cached outside the repository).
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import go_tool, repo_root
from localcluster.errors import BinariesNotFoundError

ENV_DOCKER_BIN = "PANDO_DOCKER_BIN"
"""The folder of the built engine's ``dockerd`` and ``docker-proxy``."""
DEBIAN = "20.10"
"""The release line of Debian's ``docker.io``."""
_MODULE = "github.com/docker/docker"


@dataclass(frozen=True)
class EngineBinaries:
    """One engine release: its line (``28.5``), its daemon and its port proxy."""

    version: str
    dockerd: str
    """A path, or the name found on ``PATH`` (Debian's)."""
    proxy: str | None = None
    """``--userland-proxy-path`` (``None``: the one the daemon finds, Debian's)."""

    def flags(self) -> list[str]:
        """The daemon flags that tie it to this release's other binaries."""
        return [] if self.proxy is None else [f"--userland-proxy-path={self.proxy}"]


DEBIAN_ENGINE = EngineBinaries(DEBIAN, "dockerd")
"""Debian's ``docker.io``: its daemon on ``PATH``, which finds its own proxy."""


@functools.cache
def built_version() -> str:
    """The release line ``tools/docker/build.sh`` builds (``28.5``), read from its go.mod."""
    go_mod = repo_root() / "tools" / "docker" / "go.mod"
    for line in go_mod.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == _MODULE:
            major, minor = fields[1].removeprefix("v").split(".")[:2]
            return f"{major}.{minor}"
    raise ValueError(f"{go_mod} requires no {_MODULE}")


def versions() -> tuple[str, ...]:
    """Every release line the harness can run, oldest first."""
    return (DEBIAN, built_version())


def binaries(version: str) -> EngineBinaries:
    """The binaries of release line ``version`` (one of :func:`versions`); the built engine's
    are built first if needed (minutes, once), ``FileNotFoundError`` saying why when they
    cannot be had."""
    if version == DEBIAN:
        return DEBIAN_ENGINE
    if version != built_version():
        raise ValueError(f"no Docker Engine {version}: the harness runs {', '.join(versions())}")
    try:
        dockerd = go_tool("docker", "dockerd", ENV_DOCKER_BIN, timeout=1800)
    except (BinariesNotFoundError, subprocess.SubprocessError) as exc:
        raise FileNotFoundError(str(exc)) from exc
    proxy = Path(dockerd).parent / "docker-proxy"
    return EngineBinaries(version, str(dockerd), str(proxy))
