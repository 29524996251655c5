"""What the adapter does, one feature per module, over the cache and the API (private)."""

from ._agent import AgentService, AgentSettings, default_ca_file
from ._bundles import Bundles, BundleSettings
from ._capacity import EngineCapacity
from ._edge import Edges
from ._egress_guard import EgressGuard
from ._exec import open_exec
from ._fencing import Fences
from ._firewall import EngineFirewall
from ._gateway import EgressBundles
from ._image_import import ImageImport
from ._images import pull_image, registry_auth_header
from ._logs import open_logs
from ._oci_runtimes import OciRuntimes, runtime_class, runtime_problems
from ._plan_rules import docker_problems
from ._private import PrivateNetworks
from ._records import HeldBundles, runtime_key
from ._trial import Trials
from ._usage import EngineUsage
from ._volumes import Volumes

__all__ = [
    "AgentService",
    "AgentSettings",
    "BundleSettings",
    "Bundles",
    "Edges",
    "EgressBundles",
    "EgressGuard",
    "EngineCapacity",
    "EngineFirewall",
    "EngineUsage",
    "Fences",
    "HeldBundles",
    "ImageImport",
    "OciRuntimes",
    "PrivateNetworks",
    "Trials",
    "Volumes",
    "default_ca_file",
    "docker_problems",
    "open_exec",
    "open_logs",
    "pull_image",
    "registry_auth_header",
    "runtime_class",
    "runtime_key",
    "runtime_problems",
]
