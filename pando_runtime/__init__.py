"""pando-runtime: run apps on any runtime through one stable adapter contract.

A host plans, applies, observes and destroys *bundles* (an app's workloads),
*volumes* and *edges* through a :class:`RuntimeAdapter`, loaded by name::

    import pando_runtime as pr

    async with pr.load_adapter("fake") as runtime:
        handle = await runtime.apply(plan)
        state = await runtime.observe(handle.ref)

Everything public is importable from this package; modules starting with
``_`` are private. Importing the package is cheap: each name's module is
imported when the name is first used (``_EXPORTS``), so a host that never
converts JSON never imports cattrs, and one that never reads YAML never
imports PyYAML.
"""

from __future__ import annotations

import importlib
import warnings

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers read True
if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers and the API reference
    from typing import Any

    from ._adapter import RuntimeAdapter
    from ._api_observer import (
        NO_API_OBSERVER,
        ApiObserver,
        ApiState,
        ApiStateSource,
        ObservableApi,
    )
    from ._capabilities import (
        Capability,
        ImageDelivery,
        IsolationClass,
        LogRetention,
        RuntimeCapabilities,
    )
    from ._capacity import (
        BundleUsage,
        Capacity,
        Fit,
        InUse,
        VolumeUsage,
        WorkloadUsage,
        roomiest,
    )
    from ._catalog import (
        CATALOG_NODE,
        CatalogBackend,
        CatalogInfo,
        CatalogRegistration,
        Syncer,
    )
    from ._catalog_bundles import BundleSource, bundle_service_name
    from ._catalog_registry import (
        CATALOG_ENTRY_POINT_GROUP,
        available_catalogs,
        load_catalog,
        register_catalog,
    )
    from ._catalog_singleton import CATALOG_SINGLETON, sync_as_singleton
    from ._catalog_sync import (
        CATALOG_OWNER_TAG,
        CATALOG_WRITER_META,
        CatalogSyncer,
        SyncChange,
        SyncChangeKind,
        SyncStatus,
    )
    from ._config import ConfigField, EmptyConfig, config_json_schema, setting, structure_config
    from ._convert import from_json, load_bundle_file, structure, to_json, unstructure
    from ._edge import EdgeCertificate, EdgeMount, EdgePlan, EdgePort, EdgeState
    from ._errors import (
        AdapterFailed,
        AdapterNotInstalled,
        AdapterUnavailable,
        CapabilityUnsupported,
        CapacityExceeded,
        CatalogNotInstalled,
        CatalogUnavailable,
        IncompatibleAdapter,
        InvalidConfig,
        InvalidInput,
        InvalidPlan,
        NotFound,
        NotOwner,
        PandoRuntimeError,
        Problem,
        RateLimited,
        UnknownAdapter,
        UnknownCatalog,
    )
    from ._events import (
        BundleEvent,
        BundleEventHub,
        BundleEventKind,
        BundleEventStream,
        bundle_event_channel,
    )
    from ._exec import ExecRequest, ExecResult, ExecSession
    from ._info import AdapterInfo
    from ._leases import LeaseConflict, LeaseRecord, LeaseStore, StoredLease
    from ._logs import LogOptions
    from ._member import Membership
    from ._member_slot import MembershipSlot
    from ._membership import MembershipSettings, OwnershipChange, validate_membership
    from ._observed import ObservedBundle, ObservedVolume, ObservedWorkload, WorkloadProblem
    from ._ownership import rendezvous_owner
    from ._plans import (
        BundlePlan,
        CarriedFile,
        EgressPolicy,
        EgressRule,
        HealthCheck,
        Mount,
        NetworkPlan,
        Port,
        PortProtocol,
        RegistryAuth,
        Resources,
        VolumePlan,
        WorkloadPlan,
    )
    from ._refs import BundleHandle, BundleRef, DestroyOptions, Upstream, WorkloadRef
    from ._registry import ENTRY_POINT_GROUP, available_adapters, load_adapter, register_adapter
    from ._scope import in_read_scope, read_scope, scoped_read
    from ._streams import (
        BytesReceiveStream,
        IteratorByteStream,
        MemoryByteReceiveStream,
        MemoryByteSendStream,
        byte_stream_pair,
        read_all,
    )
    from ._telemetry import InstrumentedAdapter, instrument
    from ._trial import TrialRequest, TrialResult
    from ._validation import (
        MAX_CARRIED_FILES_BYTES,
        check_plan,
        is_valid_image,
        raise_problems,
        validate_edge,
        validate_exec_request,
        validate_plan,
        validate_trial,
        validate_volume_request,
    )
    from ._version import API_VERSION, __version__, api_compatible
    from ._volumes import VolumeHandle, VolumeRequest

# Every public name, by the private module that defines it: the one table to extend when a
# name is added (with its line in the imports above and in __all__; tests/test_public_api.py
# checks that the three agree).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "_adapter": ("RuntimeAdapter",),
    "_api_observer": (
        "NO_API_OBSERVER",
        "ApiObserver",
        "ApiState",
        "ApiStateSource",
        "ObservableApi",
    ),
    "_capabilities": (
        "Capability",
        "ImageDelivery",
        "IsolationClass",
        "LogRetention",
        "RuntimeCapabilities",
    ),
    "_capacity": (
        "BundleUsage",
        "Capacity",
        "Fit",
        "InUse",
        "VolumeUsage",
        "WorkloadUsage",
        "roomiest",
    ),
    "_catalog": (
        "CATALOG_NODE",
        "CatalogBackend",
        "CatalogInfo",
        "CatalogRegistration",
        "Syncer",
    ),
    "_catalog_bundles": ("BundleSource", "bundle_service_name"),
    "_catalog_registry": (
        "CATALOG_ENTRY_POINT_GROUP",
        "available_catalogs",
        "load_catalog",
        "register_catalog",
    ),
    "_catalog_singleton": ("CATALOG_SINGLETON", "sync_as_singleton"),
    "_catalog_sync": (
        "CATALOG_OWNER_TAG",
        "CATALOG_WRITER_META",
        "CatalogSyncer",
        "SyncChange",
        "SyncChangeKind",
        "SyncStatus",
    ),
    "_config": ("ConfigField", "EmptyConfig", "config_json_schema", "setting", "structure_config"),
    "_convert": (
        "from_json",
        "load_bundle_file",
        "structure",
        "to_json",
        "unstructure",
    ),
    "_edge": ("EdgeCertificate", "EdgeMount", "EdgePlan", "EdgePort", "EdgeState"),
    "_errors": (
        "AdapterFailed",
        "AdapterNotInstalled",
        "AdapterUnavailable",
        "CapabilityUnsupported",
        "CapacityExceeded",
        "CatalogNotInstalled",
        "CatalogUnavailable",
        "IncompatibleAdapter",
        "InvalidConfig",
        "InvalidInput",
        "InvalidPlan",
        "NotFound",
        "NotOwner",
        "PandoRuntimeError",
        "Problem",
        "RateLimited",
        "UnknownAdapter",
        "UnknownCatalog",
    ),
    "_events": (
        "BundleEvent",
        "BundleEventHub",
        "BundleEventKind",
        "BundleEventStream",
        "bundle_event_channel",
    ),
    "_exec": ("ExecRequest", "ExecResult", "ExecSession"),
    "_info": ("AdapterInfo",),
    "_leases": ("LeaseConflict", "LeaseRecord", "LeaseStore", "StoredLease"),
    "_logs": ("LogOptions",),
    "_member": ("Membership",),
    "_member_slot": ("MembershipSlot",),
    "_membership": ("MembershipSettings", "OwnershipChange", "validate_membership"),
    "_observed": ("ObservedBundle", "ObservedVolume", "ObservedWorkload", "WorkloadProblem"),
    "_ownership": ("rendezvous_owner",),
    "_plans": (
        "BundlePlan",
        "CarriedFile",
        "EgressPolicy",
        "EgressRule",
        "HealthCheck",
        "Mount",
        "NetworkPlan",
        "Port",
        "PortProtocol",
        "RegistryAuth",
        "Resources",
        "VolumePlan",
        "WorkloadPlan",
    ),
    "_refs": ("BundleHandle", "BundleRef", "DestroyOptions", "Upstream", "WorkloadRef"),
    "_registry": ("ENTRY_POINT_GROUP", "available_adapters", "load_adapter", "register_adapter"),
    "_scope": ("in_read_scope", "read_scope", "scoped_read"),
    "_streams": (
        "BytesReceiveStream",
        "IteratorByteStream",
        "MemoryByteReceiveStream",
        "MemoryByteSendStream",
        "byte_stream_pair",
        "read_all",
    ),
    "_telemetry": ("InstrumentedAdapter", "instrument"),
    "_trial": ("TrialRequest", "TrialResult"),
    "_validation": (
        "MAX_CARRIED_FILES_BYTES",
        "check_plan",
        "is_valid_image",
        "raise_problems",
        "validate_edge",
        "validate_exec_request",
        "validate_plan",
        "validate_trial",
        "validate_volume_request",
    ),
    "_version": ("API_VERSION", "__version__", "api_compatible"),
    "_volumes": ("VolumeHandle", "VolumeRequest"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

# Old names, still resolvable with a DeprecationWarning, in no list: ``Protocol`` shadowed
# ``typing.Protocol`` in a star import; ``converter`` was the mutable global cattrs converter
# (use ``to_json``, ``from_json``, ``structure`` and ``unstructure``).
_RENAMED = {"Protocol": ("PortProtocol", "_plans"), "converter": ("converter", "_convert")}

__all__ = [
    "API_VERSION",
    "CATALOG_ENTRY_POINT_GROUP",
    "CATALOG_NODE",
    "CATALOG_OWNER_TAG",
    "CATALOG_SINGLETON",
    "CATALOG_WRITER_META",
    "ENTRY_POINT_GROUP",
    "MAX_CARRIED_FILES_BYTES",
    "NO_API_OBSERVER",
    "AdapterFailed",
    "AdapterInfo",
    "AdapterNotInstalled",
    "AdapterUnavailable",
    "ApiObserver",
    "ApiState",
    "ApiStateSource",
    "BundleEvent",
    "BundleEventHub",
    "BundleEventKind",
    "BundleEventStream",
    "BundleHandle",
    "BundlePlan",
    "BundleRef",
    "BundleSource",
    "BundleUsage",
    "BytesReceiveStream",
    "Capability",
    "CapabilityUnsupported",
    "Capacity",
    "CapacityExceeded",
    "CarriedFile",
    "CatalogBackend",
    "CatalogInfo",
    "CatalogNotInstalled",
    "CatalogRegistration",
    "CatalogSyncer",
    "CatalogUnavailable",
    "ConfigField",
    "DestroyOptions",
    "EdgeCertificate",
    "EdgeMount",
    "EdgePlan",
    "EdgePort",
    "EdgeState",
    "EgressPolicy",
    "EgressRule",
    "EmptyConfig",
    "ExecRequest",
    "ExecResult",
    "ExecSession",
    "Fit",
    "HealthCheck",
    "ImageDelivery",
    "InUse",
    "IncompatibleAdapter",
    "InstrumentedAdapter",
    "InvalidConfig",
    "InvalidInput",
    "InvalidPlan",
    "IsolationClass",
    "IteratorByteStream",
    "LeaseConflict",
    "LeaseRecord",
    "LeaseStore",
    "LogOptions",
    "LogRetention",
    "Membership",
    "MembershipSettings",
    "MembershipSlot",
    "MemoryByteReceiveStream",
    "MemoryByteSendStream",
    "Mount",
    "NetworkPlan",
    "NotFound",
    "NotOwner",
    "ObservableApi",
    "ObservedBundle",
    "ObservedVolume",
    "ObservedWorkload",
    "OwnershipChange",
    "PandoRuntimeError",
    "Port",
    "PortProtocol",
    "Problem",
    "RateLimited",
    "RegistryAuth",
    "Resources",
    "RuntimeAdapter",
    "RuntimeCapabilities",
    "StoredLease",
    "SyncChange",
    "SyncChangeKind",
    "SyncStatus",
    "Syncer",
    "TrialRequest",
    "TrialResult",
    "UnknownAdapter",
    "UnknownCatalog",
    "Upstream",
    "VolumeHandle",
    "VolumePlan",
    "VolumeRequest",
    "VolumeUsage",
    "WorkloadPlan",
    "WorkloadProblem",
    "WorkloadRef",
    "WorkloadUsage",
    "__version__",
    "api_compatible",
    "available_adapters",
    "available_catalogs",
    "bundle_event_channel",
    "bundle_service_name",
    "byte_stream_pair",
    "check_plan",
    "config_json_schema",
    "from_json",
    "in_read_scope",
    "instrument",
    "is_valid_image",
    "load_adapter",
    "load_bundle_file",
    "load_catalog",
    "raise_problems",
    "read_all",
    "read_scope",
    "register_adapter",
    "register_catalog",
    "rendezvous_owner",
    "roomiest",
    "scoped_read",
    "setting",
    "structure",
    "structure_config",
    "sync_as_singleton",
    "to_json",
    "unstructure",
    "validate_edge",
    "validate_exec_request",
    "validate_membership",
    "validate_plan",
    "validate_trial",
    "validate_volume_request",
]


if not TYPE_CHECKING:  # type checkers see the imports above; unknown names stay errors for them

    def __getattr__(name: str) -> Any:
        renamed = _RENAMED.get(name)
        if renamed is not None:
            new, module_name = renamed
            warnings.warn(
                f"pando_runtime.{name} is {new} now; the old name goes at 1.0",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(f".{module_name}", __name__), new)
        module = _MODULE_OF.get(name)
        if module is None:
            msg = f"module {__name__!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
