"""What the adapter's feature mixins (volumes, trial runs, edge, usage) use of the adapter.

The mixins live in modules of their own to keep one concept per module; this class declares,
for the type checker only, the plumbing they share with :class:`KubernetesAdapter`, which
defines all of it. At run time it is an empty base.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import anyio

    from pando_runtime import ExecRequest, ExecSession, RuntimeCapabilities

    from . import _objects as objects
    from ._cache import ClaimFacts, NamespaceFacts, PodFacts
    from ._client import KubeTransport
    from ._info import KubernetesConfig

__all__ = ["AdapterHost"]

T = TypeVar("T")


class AdapterHost:
    """The adapter's plumbing, as its mixins see it."""

    config: KubernetesConfig
    _settings: objects.PodSettings
    _retained: set[tuple[str, str]]
    _edge_keys: dict[str, bytes]

    if TYPE_CHECKING:

        async def _api(self) -> KubeTransport: ...
        async def _read(self, what: str, call: Callable[[], Awaitable[T]]) -> T: ...
        async def _write(self, what: str, call: Callable[[], Awaitable[T]]) -> T: ...
        async def _apply_object(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
        async def _delete(
            self,
            ns: str | None,
            plural: str,
            name: str,
            group: str = "",
            *,
            grace: int | None = None,
        ) -> None: ...
        async def capabilities(self) -> RuntimeCapabilities: ...
        def _lock(self, ns: str) -> anyio.Lock: ...
        async def _namespace(self, ns: str) -> NamespaceFacts | None: ...
        async def _pods(self, ns: str) -> list[PodFacts]: ...
        async def _claims(self, ns: str) -> list[ClaimFacts]: ...
        def _remember_claim(
            self, body: Mapping[str, Any] | None, ns: str, volume_id: str
        ) -> None: ...
        async def _volume_namespace(self, ns: str, bundle_id: str | None) -> None: ...
        async def _drop_volume_namespace(self, ns: str) -> None: ...
        async def _ensure_claim(
            self,
            ns: str,
            volume_id: str,
            *,
            bundle_id: str | None,
            name: str,
            size_bytes: int | None,
        ) -> None: ...
        async def _retain(self, ns: str, volume_id: str, *, wait: float = 0.0) -> bool: ...
        def _session(
            self, ns: str, pod: str, container: str | None, request: ExecRequest
        ) -> contextlib.AbstractAsyncContextManager[ExecSession]: ...
        async def _exec_output(
            self, ns: str, pod: str, container: str, command: tuple[str, ...]
        ) -> tuple[int | None, bytes, bytes]: ...
        async def _create(
            self, body: Mapping[str, Any], what: str | None = None
        ) -> dict[str, Any]: ...
        async def _read_log(self, ns: str, pod: str, container: str, limit: int) -> bytes: ...
