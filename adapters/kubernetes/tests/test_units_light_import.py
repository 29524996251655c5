"""Importing the adapter stays light: the client comes with a cluster, exec with the first exec.

Each check runs in a fresh interpreter and reads its ``sys.modules``, as the core's light-import
test does: the official client's package (``kubernetes``) imports its configuration loaders,
``kubernetes.stream`` and the WebSocket stack whenever any part of it is imported, so none of it
may load before a cluster is; the generated API classes (``CoreV1Api`` is one very large module)
and models never load for a request the adapter builds itself.
"""

from __future__ import annotations

from pathlib import Path

from _kubeconfigs import kubeconfig_file
from fresh_imports import modules_after

CLIENT_ROOTS = frozenset({"kubernetes", "websocket", "urllib3", "yaml", "pydantic", "dateutil"})
"""Top-level packages the client brings in (its HTTP, urllib3, too; YAML with a kubeconfig)."""
GENERATED_API = "kubernetes.client.api.core_v1_api"
GENERATED_MODELS = "kubernetes.client.models."
EXEC = "pando_runtime_kubernetes.api._exec"


def _generated(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m == GENERATED_API or m.startswith(GENERATED_MODELS)}


def test_importing_every_public_name_imports_none_of_the_client() -> None:
    loaded = modules_after(
        """
        import pando_runtime_kubernetes as pk
        for name in pk.__all__:
            getattr(pk, name)
        assert "pando_runtime_kubernetes._adapter" in __import__("sys").modules
        """
    )
    assert not {m for m in loaded if m.split(".")[0] in CLIENT_ROOTS}, (
        "the client loads with a cluster"
    )
    assert EXEC not in loaded, "exec loads with the first exec"


def test_a_cluster_and_its_transport_import_no_generated_api_or_model(tmp_path: Path) -> None:
    kubeconfig = kubeconfig_file(tmp_path / "config", "one", current="one")
    loaded = modules_after(
        f"""
        from pando_runtime_kubernetes import Cluster, KubernetesAdapter, KubeTransport
        transport = KubeTransport.for_cluster(Cluster.load({str(kubeconfig)!r}))
        transport.close()
        KubernetesAdapter({{"kubeconfig": {str(kubeconfig)!r}}})
        """
    )
    assert "kubernetes.client" in loaded, "the cluster's configuration is the client's"
    assert not _generated(loaded), sorted(_generated(loaded))[:5]
    assert EXEC not in loaded


def test_the_modules_checked_are_those_exec_imports() -> None:
    loaded = modules_after("from pando_runtime_kubernetes.api import _exec")
    assert {EXEC, "kubernetes.stream", "websocket"} <= loaded, "the check above can see them"
    assert GENERATED_API in loaded, "and exec's generated API class, which only exec needs"
