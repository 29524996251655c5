"""The engine's records of its bundles, and whose they are: what a fleet asks of a member.

A bundle is held while the engine has anything of it: a container, its network (made before
any container and kept until ``destroy``, so an app whose image could not be pulled is held),
or a volume (``destroy`` keeps them unless asked). Containers and networks are in the cache's
view, volumes in the adapter's list of them, so knowing makes no call. The runtime key names
the engine by the ``host`` setting, normalised without any lookup, and the owner by its label.
"""

from __future__ import annotations

import contextlib
import ipaddress
import posixpath
from urllib.parse import urlsplit

from ..cache import ContainerCache
from ..manifests import Naming
from ._volumes import Volumes

__all__ = ["HeldBundles", "engine_address", "runtime_key"]


def engine_address(host: str) -> str:
    """``host`` in one spelling per address, with no lookup.

    ``http://`` is ``tcp://``; the scheme and the host name are lowercase, an IPv6 address
    compressed, a trailing ``/`` dropped, a socket's path normalised (``//``, ``.``, ``..``).
    A name is not resolved: two names of one engine (``localhost``, ``127.0.0.1``) are two
    addresses.
    """
    scheme, _, rest = host.strip().partition("://")
    scheme = scheme.lower()
    if scheme == "unix":
        return "unix:///" + posixpath.normpath(rest).lstrip("/")
    scheme = "tcp" if scheme == "http" else scheme
    try:
        parts = urlsplit(f"{scheme}://{rest}")
        name, port = parts.hostname or "", parts.port
    except ValueError:  # not a URL this adapter reads: as given, less its case
        return f"{scheme}://{rest.rstrip('/').lower()}"
    if ":" in name:  # an IPv6 address: one spelling of it
        with contextlib.suppress(ValueError):
            name = f"[{ipaddress.IPv6Address(name).compressed}]"
    return f"{scheme}://{name}" + (f":{port}" if port is not None else "")


def runtime_key(host: str, naming: Naming) -> str:
    """The engine and the owner an adapter acts as: ``<address>#<prefix>.owner=<owner>``.

    Two adapters with one key see each other's apps as their own.
    """
    return f"{engine_address(host)}#{naming.owner_filter}"


class HeldBundles:
    """Which bundles the engine has any record of, from the view and the volume list."""

    def __init__(self, cache: ContainerCache, volumes: Volumes) -> None:
        self._cache = cache
        self._volumes = volumes

    def holds(self, bundle_id: str) -> bool:
        """Whether the engine has a container, the network or a volume of ``bundle_id``."""
        return self._cache.bundle(bundle_id).exists or bool(self._volumes.names_of(bundle_id))

    def bundle_ids(self) -> list[str]:
        """Every bundle the engine has a record of, sorted."""
        return sorted(self._cache.bundle_ids() | self._volumes.bundle_ids())
