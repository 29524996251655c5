"""The Kubernetes adapter of pando-runtime.

Load it by name (``pando_runtime.load_adapter("kubernetes", {...})``) or import
:class:`KubernetesAdapter` from here. Importing this package does not import
the Kubernetes client: the adapter class is resolved on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._info import ADAPTER, KubernetesConfig

if TYPE_CHECKING:
    from ._adapter import KubernetesAdapter

__all__ = ["ADAPTER", "KubernetesAdapter", "KubernetesConfig"]


def __getattr__(name: str) -> Any:
    # Lazy: the adapter module imports ``kubernetes``, which listing must not pay for.
    if name == "KubernetesAdapter":
        from ._adapter import KubernetesAdapter  # noqa: PLC0415

        return KubernetesAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
