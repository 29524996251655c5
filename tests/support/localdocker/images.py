"""The engine's images, built offline from Debian's busybox by :mod:`localcluster.images`.

The archives :mod:`localcluster.images` writes hold both an OCI layout and a docker-archive
``manifest.json``: the engine loads them with ``POST /images/load`` (what ``docker load``
does), and an adapter's ``import_image`` can be handed one. Nothing is ever pulled.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from localcluster import images
from localcluster.binaries import repo_root
from localcluster.images import BuiltImage, Content

BUSYBOX = "pando.test/busybox:1"
"""A shell, ``nc``, ``httpd`` and every other busybox applet; ``sh`` by default."""
SQUID = "pando.test/squid:1"
"""Debian's Squid, as the Kubernetes harness builds it: the Docker adapter's
``egress_gateway_image``."""
AGENT = "pando.test/agent:1"
"""The Docker adapter's agent: its static binary alone, as the entrypoint (``agent_image``)."""
ENV_AGENT_BIN = "PANDO_AGENT_BIN"
"""A directory that already holds ``pando-agent`` (else ``adapters/docker/agent/build.sh``)."""
IPTABLES = "pando.test/iptables:1"
"""Busybox and the host's ``iptables`` (its backend, its extensions): the Docker adapter's
``egress_guard_image``."""

__all__ = [
    "AGENT",
    "BUSYBOX",
    "IPTABLES",
    "SQUID",
    "BuiltImage",
    "agent_image",
    "build_image",
    "busybox_image",
    "iptables_image",
    "squid_image",
]


def busybox_image(name: str = BUSYBOX, directory: Path | None = None) -> BuiltImage:
    """The busybox image's archive (built once, then found in the cache)."""
    return images.build(images.busybox_spec(name), directory)


def build_image(
    name: str,
    *,
    files: Mapping[str, Content] | None = None,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    directory: Path | None = None,
) -> BuiltImage:
    """An image archive of busybox plus ``files`` (say, a test's own server script).

    The archive is not loaded: hand it to :meth:`DockerEngine.load_image` or to the
    adapter's ``import_image``.
    """
    return images.build_image(
        name,
        files=files,
        entrypoint=entrypoint,
        cmd=cmd,
        env=env,
        base=images.busybox_spec(name),
        directory=directory,
    )


def iptables_image(name: str = IPTABLES, directory: Path | None = None) -> BuiltImage:
    """Busybox plus the host's ``iptables`` (the binary its alternative points at, its
    libraries and every xtables extension), so the rules it writes are the engine's kind."""
    found = shutil.which("iptables")
    if found is None:
        raise FileNotFoundError("iptables not found: apt-get install iptables")
    binary = Path(found).resolve()
    extensions_dir = next(
        (d for d in (Path("/usr/lib/x86_64-linux-gnu/xtables"), Path("/usr/lib/xtables"))
         if d.is_dir()),
        None,
    )  # fmt: skip
    if extensions_dir is None:
        raise FileNotFoundError("iptables' extensions (xtables) not found")
    files: dict[str, images.Content] = {f"/usr/sbin/{binary.name}": binary}
    files |= images.library_closure(binary)
    extensions = sorted(extensions_dir.glob("*.so"))
    files |= {str(e): e.resolve() for e in extensions}
    files |= images.library_closure(*extensions)
    symlinks = {"/usr/sbin/iptables": binary.name, "/sbin/iptables": f"/usr/sbin/{binary.name}"}
    return images.build_image(
        name,
        files=files,
        symlinks=symlinks,
        dirs={"/run": images.Dir()},
        base=images.busybox_spec(name),
        directory=directory,
    )


def squid_image(name: str = SQUID, directory: Path | None = None) -> BuiltImage:
    """Debian's Squid (``squid -N -f CONFIG`` as ``proxy``), built offline from the host's
    package by :func:`localcluster.images.gateway_spec`."""
    return images.build(images.gateway_spec(name), directory)


def agent_binary() -> Path:
    """``pando-agent``: from ``$PANDO_AGENT_BIN``, else built (or found in its cache) by
    ``adapters/docker/agent/build.sh``."""
    named = os.environ.get(ENV_AGENT_BIN)
    if named:
        found = Path(named).expanduser() / "pando-agent"
    else:
        script = repo_root() / "adapters" / "docker" / "agent" / "build.sh"
        proc = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, check=False, timeout=900
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise FileNotFoundError(f"{script} failed:\n{proc.stderr[-2000:]}")
        found = Path(lines[-1]) / "pando-agent"
    if not os.access(found, os.X_OK):
        raise FileNotFoundError(f"no executable pando-agent at {found}")
    return found


def agent_image(name: str = AGENT, directory: Path | None = None) -> BuiltImage:
    """The agent's image: ``/pando-agent`` (static) as the entrypoint, run as nobody; the
    engine mounts its resolver files and the adapter a volume on ``/etc/pando-agent``."""
    spec = images.ImageSpec(
        name,
        files={"/pando-agent": agent_binary()},
        dirs={"/etc/pando-agent": images.Dir(), "/tmp": images.Dir(0o1777)},  # noqa: S108
        entrypoint=("/pando-agent",),
        user="65534:65534",
    )
    return images.build(spec, directory)
