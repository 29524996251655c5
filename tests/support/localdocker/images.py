"""The engine's images, built offline from Debian's busybox by :mod:`localcluster.images`.

The archives :mod:`localcluster.images` writes hold both an OCI layout and a docker-archive
``manifest.json``: the engine loads them with ``POST /images/load`` (what ``docker load``
does), and an adapter's ``import_image`` can be handed one. Nothing is ever pulled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from localcluster import images
from localcluster.images import BuiltImage, Content

BUSYBOX = "pando.test/busybox:1"
"""A shell, ``nc``, ``httpd`` and every other busybox applet; ``sh`` by default."""

__all__ = ["BUSYBOX", "BuiltImage", "build_image", "busybox_image"]


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
