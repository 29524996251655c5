"""pando-runtime: run apps on any runtime through one stable adapter contract.

A host plans, applies, observes and destroys *bundles* (an app's workloads),
*volumes* and *edges* through a :class:`RuntimeAdapter`, loaded by name::

    import pando_runtime as pr

    async with pr.load_adapter("fake") as runtime:
        handle = await runtime.apply(plan)
        state = await runtime.observe(handle.ref)

This package holds what a host uses. Two more namespaces hold the rest:
:mod:`pando_runtime.plugin` what an adapter's author needs to write one (registration,
validation helpers, leases, the event hub, read scopes, byte streams), and
:mod:`pando_runtime.catalog` keeping a service catalog equal to what runs. Modules starting
with ``_`` are private. Importing a namespace is cheap: each name's module is imported when
the name is first used (``_EXPORTS``), so a host that never converts JSON never imports
cattrs, and one that never reads YAML never imports PyYAML.
"""

from __future__ import annotations

from ._lazy import lazy_attributes

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers read True
if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers and the API reference
    # public submodules, reached as attributes (pr.catalog.CatalogSyncer)
    from . import blocking as blocking
    from . import catalog as catalog
    from . import plugin as plugin
    from . import testing as testing
    from ._adapter._abc import RuntimeAdapter
    from ._adapter._info import AdapterInfo
    from ._adapter._registry import available_adapters, load_adapter
    from ._adapter._versioned import supports_api
    from ._contract._capabilities import (
        Capability,
        ImageDelivery,
        IsolationClass,
        LogRetention,
        RuntimeCapabilities,
    )
    from ._contract._capacity import BundleUsage, Capacity, Fit, InUse, VolumeUsage, WorkloadUsage
    from ._contract._edge import EdgeCertificate, EdgeMount, EdgePlan, EdgePort, EdgeState
    from ._contract._errors import (
        AdapterFailed,
        AdapterNotInstalled,
        AdapterUnavailable,
        CapabilityUnsupported,
        CapacityExceeded,
        IncompatibleAdapter,
        InvalidConfig,
        InvalidInput,
        InvalidPlan,
        NotFound,
        NotOwner,
        PandoRuntimeError,
        Problem,
        RateLimited,
        StillStopping,
        UnknownAdapter,
    )
    from ._contract._events import BundleEvent, BundleEventKind, BundleEventStream
    from ._contract._exec import ExecRequest, ExecResult, ExecSession
    from ._contract._log_options import LogOptions
    from ._contract._observed import (
        ObservedBundle,
        ObservedVolume,
        ObservedWorkload,
        WorkloadProblem,
    )
    from ._contract._plans import (
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
    from ._contract._privileges import LINUX_CAPABILITIES, Privileges
    from ._contract._refs import (
        BundleHandle,
        BundleRef,
        DestroyOptions,
        Upstream,
        UpstreamDial,
        WorkloadRef,
    )
    from ._contract._streams import BytesReceiveStream, read_all
    from ._contract._trial import TrialRequest, TrialResult
    from ._contract._version import API_VERSION, __version__
    from ._contract._volumes import VolumeHandle, VolumeRequest
    from ._dial import connect_upstream
    from ._input._config import config_json_schema, structure_config
    from ._input._convert import from_json, load_bundle_file, structure, to_json, unstructure
    from ._input._validation import check_plan, validate_plan
    from ._lease_stores import (
        LeaseStoreNotInstalled,
        UnknownLeaseStore,
        available_lease_stores,
        load_lease_store,
    )
    from ._replicas._membership import Membership
    from ._replicas._ownership import rendezvous_owner
    from ._replicas._settings import MembershipSettings, OwnershipChange
    from ._telemetry._instrumented import InstrumentedAdapter, instrument

# Every public name, by the private module that defines it: the one table to extend when a
# name is added (with its line in the imports above and in __all__; tests/test_public_api.py
# checks that the three agree).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "_adapter._abc": ("RuntimeAdapter",),
    "_contract._capabilities": (
        "Capability",
        "ImageDelivery",
        "IsolationClass",
        "LogRetention",
        "RuntimeCapabilities",
    ),
    "_contract._capacity": (
        "BundleUsage",
        "Capacity",
        "Fit",
        "InUse",
        "VolumeUsage",
        "WorkloadUsage",
    ),
    "_input._config": ("config_json_schema", "structure_config"),
    "_input._convert": ("from_json", "load_bundle_file", "structure", "to_json", "unstructure"),
    "_contract._edge": ("EdgeCertificate", "EdgeMount", "EdgePlan", "EdgePort", "EdgeState"),
    "_contract._errors": (
        "AdapterFailed",
        "AdapterNotInstalled",
        "AdapterUnavailable",
        "CapabilityUnsupported",
        "CapacityExceeded",
        "IncompatibleAdapter",
        "InvalidConfig",
        "InvalidInput",
        "InvalidPlan",
        "NotFound",
        "NotOwner",
        "PandoRuntimeError",
        "Problem",
        "RateLimited",
        "StillStopping",
        "UnknownAdapter",
    ),
    "_contract._events": ("BundleEvent", "BundleEventKind", "BundleEventStream"),
    "_contract._exec": ("ExecRequest", "ExecResult", "ExecSession"),
    "_adapter._info": ("AdapterInfo",),
    "_contract._log_options": ("LogOptions",),
    "_replicas._membership": ("Membership",),
    "_replicas._settings": ("MembershipSettings", "OwnershipChange"),
    "_contract._observed": (
        "ObservedBundle",
        "ObservedVolume",
        "ObservedWorkload",
        "WorkloadProblem",
    ),
    "_replicas._ownership": ("rendezvous_owner",),
    "_contract._privileges": ("LINUX_CAPABILITIES", "Privileges"),
    "_contract._plans": (
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
    "_contract._refs": (
        "BundleHandle",
        "BundleRef",
        "DestroyOptions",
        "Upstream",
        "UpstreamDial",
        "WorkloadRef",
    ),
    "_dial": ("connect_upstream",),
    "_adapter._registry": ("available_adapters", "load_adapter"),
    "_lease_stores": (
        "LeaseStoreNotInstalled",
        "UnknownLeaseStore",
        "available_lease_stores",
        "load_lease_store",
    ),
    "_adapter._versioned": ("supports_api",),
    "_contract._streams": ("BytesReceiveStream", "read_all"),
    "_telemetry._instrumented": ("InstrumentedAdapter", "instrument"),
    "_contract._trial": ("TrialRequest", "TrialResult"),
    "_input._validation": ("check_plan", "validate_plan"),
    "_contract._version": ("API_VERSION", "__version__"),
    "_contract._volumes": ("VolumeHandle", "VolumeRequest"),
}

# Names this namespace gave before the adapter author's and the catalog's names got their own
# (API 1.2): still resolvable here, with a DeprecationWarning naming the new home.
_MOVED = {
    "ApiObserver": "pando_runtime.plugin",
    "ApiState": "pando_runtime.plugin",
    "ApiStateSource": "pando_runtime.plugin",
    "BundleEventHub": "pando_runtime.plugin",
    "BundleSource": "pando_runtime.catalog",
    "CATALOG_ENTRY_POINT_GROUP": "pando_runtime.catalog",
    "CATALOG_NODE": "pando_runtime.catalog",
    "CATALOG_OWNER_TAG": "pando_runtime.catalog",
    "CatalogBackend": "pando_runtime.catalog",
    "CatalogInfo": "pando_runtime.catalog",
    "CatalogNotInstalled": "pando_runtime.catalog",
    "CatalogRegistration": "pando_runtime.catalog",
    "CatalogSyncer": "pando_runtime.catalog",
    "CatalogUnavailable": "pando_runtime.catalog",
    "ConfigField": "pando_runtime.plugin",
    "ENTRY_POINT_GROUP": "pando_runtime.plugin",
    "EmptyConfig": "pando_runtime.plugin",
    "IteratorByteStream": "pando_runtime.plugin",
    "LeaseConflict": "pando_runtime.plugin",
    "LeaseRecord": "pando_runtime.plugin",
    "LeaseStore": "pando_runtime.plugin",
    "MAX_CARRIED_FILES_BYTES": "pando_runtime.plugin",
    "MembershipSlot": "pando_runtime.plugin",
    "MemoryByteReceiveStream": "pando_runtime.plugin",
    "MemoryByteSendStream": "pando_runtime.plugin",
    "NO_API_OBSERVER": "pando_runtime.plugin",
    "ObservableApi": "pando_runtime.plugin",
    "StoredLease": "pando_runtime.plugin",
    "SyncChange": "pando_runtime.catalog",
    "SyncChangeKind": "pando_runtime.catalog",
    "SyncStatus": "pando_runtime.catalog",
    "Syncer": "pando_runtime.catalog",
    "UnknownCatalog": "pando_runtime.catalog",
    "api_compatible": "pando_runtime.plugin",
    "available_catalogs": "pando_runtime.catalog",
    "bundle_event_channel": "pando_runtime.plugin",
    "bundle_service_name": "pando_runtime.catalog",
    "byte_stream_pair": "pando_runtime.plugin",
    "in_read_scope": "pando_runtime.plugin",
    "is_valid_image": "pando_runtime.plugin",
    "load_catalog": "pando_runtime.catalog",
    "raise_problems": "pando_runtime.plugin",
    "read_scope": "pando_runtime.plugin",
    "register_adapter": "pando_runtime.plugin",
    "register_catalog": "pando_runtime.catalog",
    "roomiest": "pando_runtime.plugin",
    "scoped_read": "pando_runtime.plugin",
    "setting": "pando_runtime.plugin",
    "validate_edge": "pando_runtime.plugin",
    "validate_exec_request": "pando_runtime.plugin",
    "validate_membership": "pando_runtime.plugin",
    "validate_trial": "pando_runtime.plugin",
    "validate_volume_request": "pando_runtime.plugin",
}

# Old names, still resolvable with a DeprecationWarning, in no list: ``Protocol`` shadowed
# ``typing.Protocol`` in a star import; ``converter`` was the mutable global cattrs converter
# (use ``to_json``, ``from_json``, ``structure`` and ``unstructure``).
_RENAMED = {
    "Protocol": ("PortProtocol", "_contract._plans"),
    "converter": ("converter", "_input._convert"),
}

__all__ = [
    "API_VERSION",
    "LINUX_CAPABILITIES",
    "AdapterFailed",
    "AdapterInfo",
    "AdapterNotInstalled",
    "AdapterUnavailable",
    "BundleEvent",
    "BundleEventKind",
    "BundleEventStream",
    "BundleHandle",
    "BundlePlan",
    "BundleRef",
    "BundleUsage",
    "BytesReceiveStream",
    "Capability",
    "CapabilityUnsupported",
    "Capacity",
    "CapacityExceeded",
    "CarriedFile",
    "DestroyOptions",
    "EdgeCertificate",
    "EdgeMount",
    "EdgePlan",
    "EdgePort",
    "EdgeState",
    "EgressPolicy",
    "EgressRule",
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
    "LeaseStoreNotInstalled",
    "LogOptions",
    "LogRetention",
    "Membership",
    "MembershipSettings",
    "Mount",
    "NetworkPlan",
    "NotFound",
    "NotOwner",
    "ObservedBundle",
    "ObservedVolume",
    "ObservedWorkload",
    "OwnershipChange",
    "PandoRuntimeError",
    "Port",
    "PortProtocol",
    "Privileges",
    "Problem",
    "RateLimited",
    "RegistryAuth",
    "Resources",
    "RuntimeAdapter",
    "RuntimeCapabilities",
    "StillStopping",
    "TrialRequest",
    "TrialResult",
    "UnknownAdapter",
    "UnknownLeaseStore",
    "Upstream",
    "UpstreamDial",
    "VolumeHandle",
    "VolumePlan",
    "VolumeRequest",
    "VolumeUsage",
    "WorkloadPlan",
    "WorkloadProblem",
    "WorkloadRef",
    "WorkloadUsage",
    "__version__",
    "available_adapters",
    "available_lease_stores",
    "check_plan",
    "config_json_schema",
    "connect_upstream",
    "from_json",
    "instrument",
    "load_adapter",
    "load_bundle_file",
    "load_lease_store",
    "read_all",
    "rendezvous_owner",
    "structure",
    "structure_config",
    "supports_api",
    "to_json",
    "unstructure",
    "validate_plan",
]

_lazy_getattr, __dir__ = lazy_attributes(
    __name__,
    _EXPORTS,
    globals(),
    moved=_MOVED,
    renamed=_RENAMED,
    submodules=frozenset({"blocking", "catalog", "plugin", "testing"}),
)

if not TYPE_CHECKING:  # type checkers see the imports above; unknown names stay errors for them
    __getattr__ = _lazy_getattr
