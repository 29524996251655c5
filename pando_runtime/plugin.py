"""What an adapter's author needs to write one, beside the contract's own types.

The contract itself (:class:`~pando_runtime.RuntimeAdapter`, the plans, the observed state,
the errors) is in :mod:`pando_runtime`, which hosts use; this namespace holds what only an
adapter needs: registration under the entry-point group (:data:`ENTRY_POINT_GROUP`,
:func:`register_adapter`), its settings (:func:`setting`), the base of a wrapper
(:class:`DelegatingAdapter`) and the check that a class covers the whole contract
(:func:`missing_contract_methods`), the validation helpers the contract's
rules are written with, the membership's lease store and write guard, the bundle event hub,
read scopes, byte streams for logs and exec, the API observer, and the lazy names
(:func:`lazy_attributes`) that keep an adapter's package as light to import as this one. See
``docs/plugins.md``.
"""

from __future__ import annotations

from . import _lazy

TYPE_CHECKING = False
if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers and the API reference
    from ._api_observer import (
        NO_API_OBSERVER,
        ApiObserver,
        ApiState,
        ApiStateSource,
        ObservableApi,
    )
    from ._capacity import roomiest
    from ._config import ConfigField, EmptyConfig, setting
    from ._contract_coverage import (
        CONTRACT_DEFAULTS,
        contract_methods,
        missing_contract_methods,
    )
    from ._delegating import DelegatingAdapter
    from ._events import BundleEventHub, bundle_event_channel
    from ._helper_scripts import (
        RESTORE_SCRIPT,
        SOCKET_TABLES,
        SOCKET_TABLES_SCRIPT,
        listening_ports,
        split_socket_tables,
    )
    from ._lazy import lazy_attributes
    from ._leases import LeaseConflict, LeaseRecord, LeaseStore, StoredLease
    from ._member_slot import MembershipSlot
    from ._membership import validate_membership
    from ._privileges import APP_CAPABILITIES
    from ._registry import ENTRY_POINT_GROUP, register_adapter
    from ._scope import in_read_scope, read_scope, scoped_read
    from ._streams import (
        IteratorByteStream,
        MemoryByteReceiveStream,
        MemoryByteSendStream,
        byte_stream_pair,
    )
    from ._validation import (
        MAX_CARRIED_FILES_BYTES,
        is_valid_image,
        raise_problems,
        validate_edge,
        validate_exec_request,
        validate_trial,
        validate_volume_request,
    )
    from ._version import api_compatible

# Every public name of this namespace, by the private module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "_api_observer": (
        "NO_API_OBSERVER",
        "ApiObserver",
        "ApiState",
        "ApiStateSource",
        "ObservableApi",
    ),
    "_capacity": ("roomiest",),
    "_config": ("ConfigField", "EmptyConfig", "setting"),
    "_contract_coverage": ("CONTRACT_DEFAULTS", "contract_methods", "missing_contract_methods"),
    "_delegating": ("DelegatingAdapter",),
    "_events": ("BundleEventHub", "bundle_event_channel"),
    "_helper_scripts": (
        "RESTORE_SCRIPT",
        "SOCKET_TABLES",
        "SOCKET_TABLES_SCRIPT",
        "listening_ports",
        "split_socket_tables",
    ),
    "_lazy": ("lazy_attributes",),
    "_leases": ("LeaseConflict", "LeaseRecord", "LeaseStore", "StoredLease"),
    "_member_slot": ("MembershipSlot",),
    "_privileges": ("APP_CAPABILITIES",),
    "_membership": ("validate_membership",),
    "_registry": ("ENTRY_POINT_GROUP", "register_adapter"),
    "_scope": ("in_read_scope", "read_scope", "scoped_read"),
    "_streams": (
        "IteratorByteStream",
        "MemoryByteReceiveStream",
        "MemoryByteSendStream",
        "byte_stream_pair",
    ),
    "_validation": (
        "MAX_CARRIED_FILES_BYTES",
        "is_valid_image",
        "raise_problems",
        "validate_edge",
        "validate_exec_request",
        "validate_trial",
        "validate_volume_request",
    ),
    "_version": ("api_compatible",),
}

__all__ = [
    "APP_CAPABILITIES",
    "CONTRACT_DEFAULTS",
    "ENTRY_POINT_GROUP",
    "MAX_CARRIED_FILES_BYTES",
    "NO_API_OBSERVER",
    "RESTORE_SCRIPT",
    "SOCKET_TABLES",
    "SOCKET_TABLES_SCRIPT",
    "ApiObserver",
    "ApiState",
    "ApiStateSource",
    "BundleEventHub",
    "ConfigField",
    "DelegatingAdapter",
    "EmptyConfig",
    "IteratorByteStream",
    "LeaseConflict",
    "LeaseRecord",
    "LeaseStore",
    "MembershipSlot",
    "MemoryByteReceiveStream",
    "MemoryByteSendStream",
    "ObservableApi",
    "StoredLease",
    "api_compatible",
    "bundle_event_channel",
    "byte_stream_pair",
    "contract_methods",
    "in_read_scope",
    "is_valid_image",
    "lazy_attributes",
    "listening_ports",
    "missing_contract_methods",
    "raise_problems",
    "read_scope",
    "register_adapter",
    "roomiest",
    "scoped_read",
    "setting",
    "split_socket_tables",
    "validate_edge",
    "validate_exec_request",
    "validate_membership",
    "validate_trial",
    "validate_volume_request",
]

__getattr__, __dir__ = _lazy.lazy_attributes(__name__, _EXPORTS, globals())
