"""Default egress: install the guard rules (see ``manifests._egress``) before any bundle runs.

Once per adapter lifetime, before its first write to a bundle: create the helper container,
start it, wait for its exit, read its output when it failed, remove it. A failure stops the
apply before anything of the bundle is written, with the helper's words and a remedy. The
script first looks for ``DOCKER-USER``: an engine that writes no iptables rules is told apart
from an image whose iptables does not match the host's, and remembered (:attr:`firewall`).
"""

from __future__ import annotations

import anyio

from pando_runtime import AdapterFailed

from .._log import logger
from ..api import EngineError, EngineTransport, FrameDecoder, write_failed
from ..manifests import (
    FIREWALL_CHECK,
    NO_DOCKER_USER,
    Naming,
    guard_chain,
    guard_request,
    guard_script,
    host_chain,
)
from ._firewall import Firewall, firewall_refused
from ._images import pull_image

__all__ = ["EgressGuard"]

_LOG = logger("egress")


class EgressGuard:
    """The rules that keep one owner's bundle networks off private ranges."""

    def __init__(self, transport: EngineTransport, naming: Naming, image: str, pool: str) -> None:
        self._api = transport
        self._naming = naming
        self._image = image
        self._pool = pool
        self._installed = False
        self._lock = anyio.Lock()
        self.firewall: Firewall | None = None
        """The engine's firewall as the guard's last run found it (``None``: not run yet)."""

    @property
    def chain(self) -> str:
        """The iptables chain of the forwarding rules (``DOCKER-USER``)."""
        return guard_chain(self._naming.owner, self._pool)

    @property
    def host_chain(self) -> str:
        """The iptables chain that keeps bundles off the daemon's namespace (``INPUT``)."""
        return host_chain(self._naming.owner, self._pool)

    async def ensure(self) -> None:
        """Install the rules unless this adapter did already (one helper run)."""
        async with self._lock:
            if self._installed:
                return
            started = anyio.current_time()
            await self.run(guard_script(self.chain, self._pool, host=self.host_chain))
            self._installed = True
            _LOG.info(
                "egress guard installed for %s in %.2f s",
                self._pool,
                anyio.current_time() - started,
            )

    async def probe(self) -> Firewall:
        """Look for ``DOCKER-USER`` in the daemon's namespace (one helper run, no rule written)."""
        try:
            await self.run(FIREWALL_CHECK)
        except AdapterFailed:
            if self.firewall is None or self.firewall.usable:
                raise  # not the firewall: the image, the daemon, NET_ADMIN
        return self.firewall or Firewall("iptables", "the egress guard's check")

    async def run(self, script: str) -> None:
        """Run ``script`` once in the daemon's network namespace; its failure is raised."""
        body = guard_request(self._naming, self._image, script)
        container_id = await self._create(body)
        try:
            await self._api.request("POST", "/containers/{id}/start", args={"id": container_id})
            answer = await self._api.request(
                "POST", "/containers/{id}/wait", args={"id": container_id}
            )
            code = int(answer.json().get("StatusCode", -1))
            if code == NO_DOCKER_USER:
                self.firewall = Firewall("none", "the egress guard's check")
                raise firewall_refused(self.firewall, "the egress guard ('egress_guard_image')")
            if code == 0:
                self.firewall = Firewall("iptables", "the egress guard's check")
            else:
                output = await self._output(container_id)
                raise AdapterFailed(
                    f"the egress guard exited with {code}: {output[-300:]}",
                    remedy="Run the adapter against a daemon that grants NET_ADMIN to "
                    "host-network containers, with an 'egress_guard_image' whose iptables "
                    "matches the host's (nft or legacy), or unset 'egress_guard_image' and "
                    "add DOCKER-USER rules yourself (docs/docker.md); nothing of the "
                    "bundle was written.",
                    details={"image": self._image, "exit_code": code},
                )
        except EngineError as error:
            raise write_failed(error, "running the egress guard") from None
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self._api.request(
                        "DELETE",
                        "/containers/{id}",
                        args={"id": container_id},
                        params={"force": True},
                    )
                except EngineError:
                    _LOG.warning("could not remove the egress guard's helper container")

    async def _create(self, body: dict[str, object]) -> str:
        for attempt in range(2):
            try:
                answer = await self._api.request("POST", "/containers/create", body=body)
            except EngineError as error:
                if error.not_found and attempt == 0:
                    problem = await pull_image(self._api, self._image, None)
                    if problem is None:
                        continue
                    raise AdapterFailed(
                        f"the egress guard's image {self._image!r} is not on the daemon "
                        f"and could not be pulled: {problem}",
                        remedy="Load an image with iptables under that name, or change the "
                        "'egress_guard_image' setting; nothing of the bundle was written.",
                        details={"image": self._image},
                    ) from None
                raise write_failed(error, "creating the egress guard") from None
            return str(answer.json()["Id"])
        raise AdapterFailed("the egress guard's image vanished after its pull")

    async def _output(self, container_id: str) -> str:
        response = await self._api.request(
            "GET",
            "/containers/{id}/logs",
            args={"id": container_id},
            params={"stdout": True, "stderr": True},
        )
        decoder = FrameDecoder()
        frames = decoder.feed(response.content)
        if not frames:
            return response.text.strip()
        return b"".join(data for _, data in frames).decode("utf-8", "replace").strip()
