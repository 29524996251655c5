"""One cluster's connection: its transport, made on first use, and what it counts.

The transport is made lazily from the settings (so constructing an adapter does no I/O; a
kubeconfig may run an exec plugin). An :class:`~pando_runtime.plugin.ApiObserver` given to
the session is handed to the transport, naming the cluster. It logs on
``pando_runtime.kubernetes.session``: INFO when it connects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping

import anyio
import anyio.to_thread

from pando_runtime import AdapterUnavailable
from pando_runtime.plugin import NO_API_OBSERVER, ApiObserver

from .._log import logger
from ..api._transport import KubeTransport
from ._connect import server_address
from ._errors import ClusterErrors

__all__ = ["ClusterConnection"]

_LOG = logger("session")


class ClusterConnection:
    """The transport to one cluster: ``transport`` if given, else made by ``connect``.

    ``errors``: the cluster's errors (a configuration that cannot be used is
    :class:`AdapterUnavailable` naming the cluster).
    """

    def __init__(
        self,
        errors: ClusterErrors,
        connect: Callable[[], KubeTransport],
        *,
        transport: KubeTransport | None = None,
    ) -> None:
        self._errors = errors
        self._connect = connect
        self._lock = anyio.Lock()
        self._transport = transport
        self._observer: ApiObserver = NO_API_OBSERVER
        if transport is not None:
            self._adopt(transport)

    @property
    def name(self) -> str | None:
        """The cluster's name given to the session (``None`` for an adapter's only one)."""
        return self._errors.name

    def observe(self, observer: ApiObserver) -> None:
        """Report every API call to ``observer`` (from now, and on a transport made later)."""
        self._observer = observer
        if self._transport is not None:
            self._transport.observer = observer

    def _adopt(self, transport: KubeTransport) -> None:
        transport.observer = self._observer
        if self.name:
            transport.cluster = self.name

    @property
    def made(self) -> KubeTransport | None:
        """The transport if it was made already (no I/O), else ``None``."""
        return self._transport

    @property
    def log_name(self) -> str | None:
        """The cluster's name in log records (``None`` when not known yet)."""
        return self.name or (self._transport.cluster if self._transport is not None else None)

    @property
    def api_calls(self) -> int:
        """API calls made so far (every request and every opened stream)."""
        return self._transport.calls if self._transport is not None else 0

    @property
    def api_retries(self) -> int:
        """Requests sent again after a 429 so far (as the server's ``Retry-After`` said)."""
        return self._transport.retries if self._transport is not None else 0

    @property
    def calls_by_kind(self) -> Mapping[str, int]:
        """API calls so far by method and kind (``"PATCH pods"``), for tests and benchmarks."""
        return dict(self._transport.calls_by_kind) if self._transport is not None else {}

    @property
    def open_watches(self) -> dict[str, int]:
        """The watches open now, by resource."""
        return dict(self._transport.open_watches) if self._transport is not None else {}

    async def transport(self) -> KubeTransport:
        """The transport, made on first use (a kubeconfig may run an exec plugin)."""
        if self._transport is None:
            async with self._lock:
                if self._transport is None:
                    self._transport = await self._made()
        return self._transport

    async def _made(self) -> KubeTransport:
        try:
            transport = await anyio.to_thread.run_sync(self._connect)
        except AdapterUnavailable as error:
            if not self.name or error.details.get("cluster") == self.name:
                raise
            raise self._errors.down(error.message, remedy=error.remedy) from error
        except (OSError, ValueError) as error:  # Cluster.load reports the rest
            raise self._errors.down(
                f"no usable Kubernetes configuration: {error}",
                remedy="Set 'kubeconfig'/'context', or run inside a cluster.",
            ) from error
        self._adopt(transport)
        _LOG.info(
            "connected to cluster %s at %s",
            transport.cluster or "(unnamed)",
            server_address(transport.configuration.host),
            extra={"cluster": transport.cluster},
        )
        return transport

    @contextlib.asynccontextmanager
    async def coordinating(self) -> AsyncIterator[None]:
        """The block's calls (a replica's Leases) never wait behind the apps' calls.

        See :meth:`KubeTransport.coordinating`.
        """
        api = await self.transport()
        with api.coordinating():
            yield

    def close(self) -> None:
        """Close the connection pools (when a transport was made). Safe to call twice."""
        if self._transport is not None:
            self._transport.close()
