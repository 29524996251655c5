"""What an adapter's author needs to write one, beside the contract's own types.

The contract itself (:class:`~pando_runtime.RuntimeAdapter`, the plans, the observed state,
the errors) is in :mod:`pando_runtime`, which hosts use; this namespace holds what only an
adapter needs: registration under the entry-point group (:data:`ENTRY_POINT_GROUP`,
:func:`register_adapter`), its settings (:func:`setting`), the base of a wrapper
(:class:`DelegatingAdapter`) and the check that a class covers the whole contract
(:func:`missing_contract_methods`), the validation helpers the contract's
rules are written with, the membership's lease store and write guard, the epoch of a write
in progress (:func:`write_epoch`), the lease-store kind of plugin
(:class:`LeaseStoreInfo`, :data:`LEASE_STORE_ENTRY_POINT_GROUP`), the bundle event hub,
read scopes, byte streams for logs and exec, the API observer, the egress gateway's
configuration (:func:`squid_config`), and the lazy names
(:func:`lazy_attributes`) that keep an adapter's package as light to import as this one. See
``docs/plugins.md``.
"""

from __future__ import annotations

from . import _lazy

TYPE_CHECKING = False
if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers and the API reference
    from ._adapter._api_observer import (
        NO_API_OBSERVER,
        ApiObserver,
        ApiState,
        ApiStateSource,
        ObservableApi,
    )
    from ._adapter._coverage import (
        CONTRACT_DEFAULTS,
        contract_methods,
        missing_contract_methods,
    )
    from ._adapter._delegating import DelegatingAdapter
    from ._adapter._event_hub import BundleEventHub, bundle_event_channel
    from ._adapter._helper_scripts import (
        RESTORE_SCRIPT,
        SOCKET_TABLES,
        SOCKET_TABLES_SCRIPT,
        listening_ports,
        split_socket_tables,
    )
    from ._adapter._registry import ENTRY_POINT_GROUP, register_adapter
    from ._adapter._scope import in_read_scope, read_scope, scoped_read
    from ._adapter._squid import squid_config
    from ._adapter._versioned import VersionedAdapter
    from ._contract._capabilities import runtime_sandbox
    from ._contract._capacity import roomiest
    from ._contract._privileges import APP_CAPABILITIES
    from ._contract._streams import (
        IteratorByteStream,
        MemoryByteReceiveStream,
        MemoryByteSendStream,
        byte_stream_pair,
    )
    from ._contract._version import api_compatible
    from ._input._config import ConfigField, EmptyConfig, setting
    from ._input._validation import (
        MAX_CARRIED_FILES_BYTES,
        is_valid_image,
        raise_problems,
        validate_edge,
        validate_exec_request,
        validate_trial,
        validate_volume_request,
    )
    from ._lazy import lazy_attributes
    from ._lease_stores import (
        LEASE_STORE_ENTRY_POINT_GROUP,
        LeaseStoreClient,
        LeaseStoreInfo,
        LeaseStoreSetting,
        register_lease_store,
    )
    from ._replicas._leases import (
        LeaseConflict,
        LeaseRecord,
        LeaseStore,
        StoredLease,
        decode_lease_record,
        encode_lease_record,
    )
    from ._replicas._settings import validate_membership
    from ._replicas._slot import MembershipSlot
    from ._store_membership import StoreMembership
    from ._tls import (
        Pem,
        TlsMaterial,
        TlsSettings,
        TlsSetup,
        certificate_validity,
        https_context,
        https_verify,
        load_tls,
        tls_failure,
        tls_failure_message,
    )
    from ._write_epochs import WriteEpoch, WriteEpochs, write_epoch

# Every public name of this namespace, by the private module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "_adapter._api_observer": (
        "NO_API_OBSERVER",
        "ApiObserver",
        "ApiState",
        "ApiStateSource",
        "ObservableApi",
    ),
    "_contract._capabilities": ("runtime_sandbox",),
    "_contract._capacity": ("roomiest",),
    "_input._config": ("ConfigField", "EmptyConfig", "setting"),
    "_adapter._coverage": ("CONTRACT_DEFAULTS", "contract_methods", "missing_contract_methods"),
    "_adapter._delegating": ("DelegatingAdapter",),
    "_adapter._versioned": ("VersionedAdapter",),
    "_adapter._event_hub": ("BundleEventHub", "bundle_event_channel"),
    "_adapter._helper_scripts": (
        "RESTORE_SCRIPT",
        "SOCKET_TABLES",
        "SOCKET_TABLES_SCRIPT",
        "listening_ports",
        "split_socket_tables",
    ),
    "_replicas._leases": (
        "LeaseConflict",
        "LeaseRecord",
        "LeaseStore",
        "StoredLease",
        "decode_lease_record",
        "encode_lease_record",
    ),
    "_replicas._slot": ("MembershipSlot",),
    "_lease_stores": (
        "LEASE_STORE_ENTRY_POINT_GROUP",
        "LeaseStoreClient",
        "LeaseStoreInfo",
        "LeaseStoreSetting",
        "register_lease_store",
    ),
    "_store_membership": ("StoreMembership",),
    "_tls": (
        "Pem",
        "TlsMaterial",
        "TlsSettings",
        "TlsSetup",
        "certificate_validity",
        "https_context",
        "https_verify",
        "load_tls",
        "tls_failure",
        "tls_failure_message",
    ),
    "_write_epochs": ("WriteEpoch", "WriteEpochs", "write_epoch"),
    "_replicas._settings": ("validate_membership",),
    "_adapter._registry": ("ENTRY_POINT_GROUP", "register_adapter"),
    "_adapter._scope": ("in_read_scope", "read_scope", "scoped_read"),
    "_adapter._squid": ("squid_config",),
    "_contract._privileges": ("APP_CAPABILITIES",),
    "_lazy": ("lazy_attributes",),
    "_contract._streams": (
        "IteratorByteStream",
        "MemoryByteReceiveStream",
        "MemoryByteSendStream",
        "byte_stream_pair",
    ),
    "_input._validation": (
        "MAX_CARRIED_FILES_BYTES",
        "is_valid_image",
        "raise_problems",
        "validate_edge",
        "validate_exec_request",
        "validate_trial",
        "validate_volume_request",
    ),
    "_contract._version": ("api_compatible",),
}

__all__ = [
    "APP_CAPABILITIES",
    "CONTRACT_DEFAULTS",
    "ENTRY_POINT_GROUP",
    "LEASE_STORE_ENTRY_POINT_GROUP",
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
    "LeaseStoreClient",
    "LeaseStoreInfo",
    "LeaseStoreSetting",
    "MembershipSlot",
    "MemoryByteReceiveStream",
    "MemoryByteSendStream",
    "ObservableApi",
    "Pem",
    "StoreMembership",
    "StoredLease",
    "TlsMaterial",
    "TlsSettings",
    "TlsSetup",
    "VersionedAdapter",
    "WriteEpoch",
    "WriteEpochs",
    "api_compatible",
    "bundle_event_channel",
    "byte_stream_pair",
    "certificate_validity",
    "contract_methods",
    "decode_lease_record",
    "encode_lease_record",
    "https_context",
    "https_verify",
    "in_read_scope",
    "is_valid_image",
    "lazy_attributes",
    "listening_ports",
    "load_tls",
    "missing_contract_methods",
    "raise_problems",
    "read_scope",
    "register_adapter",
    "register_lease_store",
    "roomiest",
    "runtime_sandbox",
    "scoped_read",
    "setting",
    "split_socket_tables",
    "squid_config",
    "tls_failure",
    "tls_failure_message",
    "validate_edge",
    "validate_exec_request",
    "validate_membership",
    "validate_trial",
    "validate_volume_request",
    "write_epoch",
]

__getattr__, __dir__ = _lazy.lazy_attributes(__name__, _EXPORTS, globals())
