"""Kubeconfig files found and merged the way kubectl merges them.

Which files: the explicit path (or ``os.pathsep``-separated list of paths, merged as
``$KUBECONFIG``'s; a named file that does not exist is reported); else every file named by
``$KUBECONFIG`` (a ``os.pathsep``-separated list; missing files are skipped, and the list is
used even if none exists, as kubectl does); else ``~/.kube/config``.

How they merge: for each named entry (context, cluster, user) the first file
that defines the name wins, and ``current-context`` comes from the first file
that sets one. The official client's own merger takes the *last* file's
``current-context`` and gives up on the whole list when one file is broken, so
the merge is done here, each entry remembering its file (the client's ``ConfigNode``
is made of them when a context is loaded, so relative certificate and token paths
resolve against the file that named them). Loading a context's credentials is left to
the client's ``KubeConfigLoader``: exec plugins, token files, certificates, auth
providers. Reading and merging needs only YAML, not the client: a warm start keys its
saved cache by what a context says of its server (:meth:`MergedKubeconfig.server`)
before the client is imported.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from kubernetes.client import Configuration
    from kubernetes.config.kube_config import ConfigNode

__all__ = ["ClusterProblem", "MergedKubeconfig", "kubeconfig_paths"]

SECTIONS = ("clusters", "contexts", "users")


@attrs.frozen
class ClusterProblem:
    """A kubeconfig file or context that could not be loaded, and why.

    ``context`` is ``None`` when the whole file is the problem. ``reason`` comes
    from the loader and never holds a credential.
    """

    source: str
    """The kubeconfig file (or the in-cluster service-account directory)."""
    context: str | None
    reason: str

    def __str__(self) -> str:
        where = self.source if self.context is None else f"{self.source}, context {self.context!r}"
        return f"{where}: {self.reason}"


def kubeconfig_paths(
    explicit: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Path]:
    """The kubeconfig files to read, in precedence order (they may not exist).

    ``explicit`` may list several files as ``$KUBECONFIG`` does (``a:b``; ``a;b`` on Windows).
    """
    env = os.environ if environ is None else environ
    listed = str(explicit) if explicit is not None else ""
    listed = listed or env.get("KUBECONFIG", "")
    if listed:
        return [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def _read(path: Path) -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    with path.open(encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise TypeError("not a kubeconfig (the document is not a mapping)")
    for section in SECTIONS:
        entries = doc.get(section) or []
        if not isinstance(entries, list):
            raise TypeError(f"{section!r} is not a list")
    return doc


def _entry_name(entry: Any) -> str | None:
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        return str(entry["name"])
    return None


@attrs.frozen
class _Entry:
    """One named entry of a kubeconfig file, and the file that defined it."""

    path: Path
    value: dict[str, Any]

    def field(self, section: str, key: str) -> Any:
        """``value[section][key]`` (``None`` when absent or not a mapping)."""
        body = self.value.get(section)
        return body.get(key) if isinstance(body, dict) else None


@attrs.define
class MergedKubeconfig:
    """Several kubeconfig files merged into one, with the file of every entry."""

    files: list[Path] = attrs.field(factory=list)
    """Files read (those that exist), in precedence order."""
    current_context: str | None = None
    problems: list[ClusterProblem] = attrs.field(factory=list)
    """Files that could not be read; named files that do not exist when ``explicit``."""
    _entries: dict[str, dict[str, _Entry]] = attrs.field(
        factory=lambda: {section: {} for section in SECTIONS}
    )

    @classmethod
    def read(cls, paths: Sequence[Path], *, report_missing: bool = False) -> MergedKubeconfig:
        """Read and merge ``paths``; a file that cannot be read is a problem, not an end."""
        import yaml  # noqa: PLC0415 - YAML and the client load with the first kubeconfig

        merged = cls()
        for path in paths:
            if not path.is_file():
                if report_missing:
                    merged.problems.append(ClusterProblem(str(path), None, "file does not exist"))
                continue
            try:
                doc = _read(path)
            except (OSError, TypeError, ValueError, yaml.YAMLError) as error:
                reason = f"cannot read: {type(error).__name__}: {error}"
                merged.problems.append(ClusterProblem(str(path), None, reason))
                continue
            merged._add(path, doc)
        return merged

    @classmethod
    def of_document(cls, where: str, doc: Mapping[str, Any]) -> MergedKubeconfig:
        """One kubeconfig given as a document (a Secret's value), named ``where`` in errors."""
        merged = cls()
        merged._add(Path(where), doc)
        return merged

    def _add(self, path: Path, doc: Mapping[str, Any]) -> None:
        self.files.append(path)
        for section in SECTIONS:
            known = self._entries[section]
            for entry in doc.get(section) or []:
                name = _entry_name(entry)
                if name is not None and name not in known:  # the first definition wins
                    known[name] = _Entry(path, entry)
        current = doc.get("current-context")
        if self.current_context is None and isinstance(current, str) and current:
            self.current_context = current

    @property
    def contexts(self) -> list[str]:
        """Every context name, in the order the files define them."""
        return list(self._entries["contexts"])

    def source(self, context: str) -> str:
        """The file that defines ``context``."""
        node = self._entries["contexts"].get(context)
        return str(node.path) if node is not None else ", ".join(map(str, self.files))

    def namespace(self, context: str) -> str | None:
        """The context's namespace, if it names one."""
        node = self._entries["contexts"].get(context)
        return (_text(node.field("context", "namespace")) or None) if node is not None else None

    def server(self, context: str) -> tuple[str, bytes | None, bool] | None:
        """What ``context``'s cluster entry says of its API server, read without the client.

        ``(server URL, the CA certificates it trusts, insecure)``: the CA's bytes from
        ``certificate-authority-data`` or the ``certificate-authority`` file (relative to the
        file that named the cluster), ``None`` when it names none (the system's trust store);
        ``insecure``: ``insecure-skip-tls-verify``. ``None`` when the context or its cluster's
        server is not there; ``OSError``/``ValueError`` when its CA cannot be read.
        """
        node = self._entries["contexts"].get(context)
        if node is None:
            return None
        cluster = self._entries["clusters"].get(_text(node.field("context", "cluster")) or "")
        if cluster is None:
            return None
        server = _text(cluster.field("cluster", "server"))
        if not server:
            return None
        insecure = cluster.field("cluster", "insecure-skip-tls-verify") is True
        data = _text(cluster.field("cluster", "certificate-authority-data"))
        if data:
            return server, base64.b64decode(data, validate=False), insecure
        named = _text(cluster.field("cluster", "certificate-authority"))
        if named:
            return server, (cluster.path.parent / Path(named).expanduser()).read_bytes(), insecure
        return server, None, insecure

    def _config_node(self) -> ConfigNode:
        from kubernetes.config.kube_config import ConfigNode  # noqa: PLC0415

        def node(section: str, name: str, entry: _Entry) -> ConfigNode:
            where = f"{entry.path}/{section}[name={name}]"
            return ConfigNode(where, entry.value, str(entry.path))  # type: ignore[no-untyped-call]

        value: dict[str, Any] = {
            s: [node(s, name, entry) for name, entry in self._entries[s].items()] for s in SECTIONS
        }
        value["current-context"] = self.current_context
        first = str(self.files[0]) if self.files else "kubeconfig"
        return ConfigNode(first, value, first)  # type: ignore[no-untyped-call]

    def load(self, context: str, *, temp_file_path: str | None = None) -> Configuration:
        """A fresh client ``Configuration`` for ``context``: server, TLS and credentials.

        Runs the context's exec plugin or reads its token file, as the official
        client does. Raises (``ConfigException``, ``OSError``, ``ValueError``...)
        when the context cannot be loaded.
        """
        from kubernetes.client import Configuration  # noqa: PLC0415
        from kubernetes.config.kube_config import KubeConfigLoader  # noqa: PLC0415

        if context not in self._entries["contexts"]:
            raise KeyError(f"no context named {context!r}")
        loader = KubeConfigLoader(  # type: ignore[no-untyped-call]
            config_dict=self._config_node(),
            active_context=context,
            config_base_path=None,  # each entry's own file
            temp_file_path=temp_file_path,
        )
        configuration = Configuration()
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
        node = self._entries["contexts"][context]
        cluster = self._entries["clusters"].get(_text(node.field("context", "cluster")) or "")
        if cluster is None or not cluster.field("cluster", "server"):
            raise ValueError("the context's cluster names no server")
        user = self._entries["users"].get(_text(node.field("context", "user")) or "")
        if (
            user is not None
            and user.field("user", "exec") is not None
            and not _has_credentials(configuration)
        ):
            # The client logs the plugin's failure and carries on without credentials.
            raise ValueError("the exec plugin gave no credentials (its error is in the log)")
        return configuration


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _has_credentials(configuration: Configuration) -> bool:
    return bool(configuration.api_key.get("BearerToken") or configuration.cert_file)
