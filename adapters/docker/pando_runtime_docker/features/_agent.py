"""The engine's agent: how a host on another machine reaches this owner's workloads.

One container per owner (``manifests._agent``), made or kept when the adapter opens, joined
to every bundle network of the owner (those that exist then; each new one as it is made, as
a ``proxy_container`` is). The adapter keeps the authority (``manifests._agent_pki``): it
writes the agent's certificate, its key and the trusted authorities into the agent's volume
(``PUT /containers/{id}/archive``, never a label, an env value or an argument), and issues
the host's client certificate, which :meth:`AgentService.dial` hands out in
:class:`~pando_runtime.UpstreamDial`. The agent reads its files again when they change, so
the certificate is renewed in place (every 30 days of a 90-day life) and no connection is
cut.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path
from typing import Any

import anyio

from pando_runtime import InvalidConfig, Problem, UpstreamDial

from .._log import logger
from ..api import EngineError, EngineTransport, write_failed
from ..cache import ContainerCache
from ..manifests import (
    AGENT_DIR,
    AgentNames,
    Authority,
    Issued,
    agent_files,
    agent_network_request,
    agent_request,
    certificates_in,
    dial_line,
)
from ._images import create_pulling

__all__ = ["AgentService", "AgentSettings", "default_ca_file"]

_LOG = logger("agent")
_RETRY = 300.0
"""Seconds before a failed renewal is tried again."""


def default_ca_file(owner: str) -> Path:
    """Where the authority is kept when no setting names it: the user's state folder."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "pando-runtime" / "docker-agent" / f"{owner}-ca.pem"


class AgentSettings:
    """What the agent feature needs of the adapter's settings."""

    def __init__(
        self,
        *,
        image: str,
        address: str,
        port: int,
        pool: str,
        ca_pem: str | None,
        ca_file: Path,
        trusted_pem: str | None,
    ) -> None:
        self.image = image
        self.address = address
        self.port = port
        self.pool = pool
        self.ca_pem = ca_pem
        self.ca_file = ca_file
        self.trusted_pem = trusted_pem


def _read_or_make(path: Path, owner: str) -> str:
    """The authority file's text; a new authority written there (0600) when it is absent.

    Written to a temporary file, then linked into place: two processes starting at once
    both read the one that won.
    """
    try:
        return path.read_text()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".ca-")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(Authority.generate(owner).to_pem())
        try:
            os.link(temporary, path)
            _LOG.info("made a new agent authority for owner %s in %s", owner, path)
        except FileExistsError:
            pass
    finally:
        Path(temporary).unlink()
    return path.read_text()


class AgentService:
    """This owner's agent on one engine, and the credentials a host dials it with."""

    def __init__(
        self,
        transport: EngineTransport,
        cache: ContainerCache,
        names: AgentNames,
        settings: AgentSettings,
    ) -> None:
        self._api = transport
        self._cache = cache
        self._names = names
        self._settings = settings
        self._authority: Authority | None = None
        self._host: Issued | None = None
        self._renew_at: dt.datetime | None = None
        self._lock = anyio.Lock()

    @property
    def container(self) -> str:
        """The agent's container name (joined to each bundle network as it is made)."""
        return self._names.container

    # -- credentials -------------------------------------------------------------------------

    def load_authority(self) -> Authority:
        """Read (or make) the authority: from ``agent_ca``, else from ``agent_ca_file``.

        Raises:
            InvalidConfig: The text or the file does not hold a CA certificate and its key.
        """
        if self._authority is not None:
            return self._authority
        key = "agent_ca"
        try:
            if self._settings.ca_pem is not None:
                text = self._settings.ca_pem
            else:
                key = "agent_ca_file"
                text = _read_or_make(self._settings.ca_file, self._names.naming.owner)
            self._authority = Authority.from_pem(text)
        except (ValueError, OSError) as error:
            where = "" if key == "agent_ca" else f" ({self._settings.ca_file})"
            raise InvalidConfig(
                "the agent's authority cannot be read",
                [Problem(key, f"{error}{where}", "bad_authority")],
                remedy="Give a PEM CA certificate with its unencrypted ECDSA key, or remove "
                "the file to have a new authority made.",
            ) from None
        return self._authority

    def trusted_pem(self) -> str:
        """The authorities hosts and the agent trust: the adapter's, then ``agent_trusted_cas``."""
        authority = self.load_authority()
        extra = self._settings.trusted_pem or ""
        if extra:
            certificates_in(extra)  # checked when the adapter was made
        return authority.cert_pem + extra

    def dial(self, container: str, port: int) -> UpstreamDial:
        """What a host needs to reach ``container:port`` through the agent (no I/O).

        The host's certificate is issued once and again after 30 days (CPU only).
        """
        authority = self.load_authority()
        now = dt.datetime.now(dt.UTC)
        if self._host is None or now >= self._host.renew_at:
            self._host = authority.issue_host(self._names.naming.owner, now)
        address = self._settings.address
        host = f"[{address}]" if ":" in address else address
        return UpstreamDial(
            address=f"{host}:{self._settings.port}",
            server_name=address,
            ca_pem=self.trusted_pem(),
            client_cert_pem=self._host.cert_pem,
            client_key_pem=self._host.key_pem,
            first_line=dial_line(container, port),
        )

    # -- the container -----------------------------------------------------------------------

    async def open(self) -> None:
        """Make or keep the agent, join it to every bundle network, give it fresh credentials.

        A container whose spec is this adapter's is kept (started if it was stopped); any
        other is replaced.
        """
        self.load_authority()
        request = agent_request(
            self._names,
            image=self._settings.image,
            pool=self._settings.pool,
            published_port=self._settings.port,
        )
        async with self._lock:
            current = await self._inspect()
            labels = ((current or {}).get("Config") or {}).get("Labels") or {}
            if current is not None and labels.get(self._names.naming.spec_key) != request.spec:
                await self._remove()
                current = None
            if current is None:
                await self._ensure_network()
                await create_pulling(self._api, self.container, request.body, "agent")
                await self._write_credentials()
                await self._join_all()
                await self._start()
                _LOG.info("agent %s created", self.container)
                return
            await self._write_credentials()
            await self._join_all(current)
            if not ((current.get("State") or {}).get("Running")):
                await self._start()

    async def keep_renewed(self) -> None:
        """Renew the agent's certificate in place before it gets old (runs while open)."""
        while True:
            renew_at = self._renew_at or dt.datetime.now(dt.UTC)
            await anyio.sleep(max(1.0, (renew_at - dt.datetime.now(dt.UTC)).total_seconds()))
            try:
                await self.renew()
            except Exception:  # noqa: BLE001 - logged, tried again: renewal must go on
                _LOG.warning("renewing the agent's certificate failed; trying again later")
                self._renew_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=_RETRY)

    async def renew(self) -> None:
        """Write a new certificate (and the trusted authorities) into the running agent."""
        async with self._lock:
            await self._write_credentials()
        _LOG.info("agent %s certificate renewed", self.container)

    async def remove(self) -> None:
        """Remove the agent's container (its volume with it) and its network; idempotent."""
        async with self._lock:
            await self._remove()
            try:
                await self._api.request(
                    "DELETE", "/networks/{id}", args={"id": self._names.network}
                )
            except EngineError as error:
                if not error.not_found:
                    raise write_failed(error, "removing the agent's network") from None

    async def _write_credentials(self) -> None:
        issued = self.load_authority().issue_agent(self._settings.address)
        archive = agent_files(issued.cert_pem, issued.key_pem, self.trusted_pem())
        try:
            await self._api.request(
                "PUT",
                "/containers/{id}/archive",
                args={"id": self.container},
                params={"path": AGENT_DIR},
                content=archive,
                headers={"Content-Type": "application/x-tar"},
            )
        except EngineError as error:
            raise write_failed(error, "giving the agent its certificate") from None
        self._renew_at = issued.renew_at

    async def _inspect(self) -> dict[str, Any] | None:
        try:
            return dict(
                await self._api.get_json("/containers/{id}/json", args={"id": self.container})
            )
        except EngineError as error:
            if error.not_found:
                return None
            raise write_failed(error, "reading the agent's container") from None

    async def _ensure_network(self) -> None:
        try:
            await self._api.request(
                "POST", "/networks/create", body=agent_network_request(self._names)
            )
        except EngineError as error:
            if not error.conflict:  # it exists already
                raise write_failed(error, "creating the agent's network") from None

    async def _join_all(self, current: dict[str, Any] | None = None) -> None:
        """Join every bundle network of the owner the agent is not on yet."""
        networks = ((current or {}).get("NetworkSettings") or {}).get("Networks") or {}
        joined = {str(n.get("NetworkID")) for n in networks.values()}
        for network_id in self._cache.network_ids():
            if network_id in joined:
                continue
            try:
                await self._api.request(
                    "POST",
                    "/networks/{id}/connect",
                    args={"id": network_id},
                    body={"Container": self.container},
                )
            except EngineError as error:
                if error.status != 403 and not error.not_found:  # noqa: PLR2004 - on it already
                    raise write_failed(error, "joining the agent to a bundle network") from None

    async def _start(self) -> None:
        try:
            await self._api.request("POST", "/containers/{id}/start", args={"id": self.container})
        except EngineError as error:
            raise write_failed(error, "starting the agent") from None

    async def _remove(self) -> None:
        try:
            await self._api.request(
                "DELETE",
                "/containers/{id}",
                args={"id": self.container},
                params={"force": True, "v": True},
            )
        except EngineError as error:
            if not error.not_found:
                raise write_failed(error, "removing the agent's container") from None
