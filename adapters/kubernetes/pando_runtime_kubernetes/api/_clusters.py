"""Clusters: a set loaded from kubeconfig files and the in-cluster service account.

A :class:`ClusterSet` holds every cluster a process can address by name (every
context of the merged kubeconfig files, and ``in-cluster`` when running in a
pod), the default one, and the problems met while loading: a context that
cannot be loaded is reported with its file and the reason, the others stay
usable. A :class:`Cluster` is one member: its name, a client ``Configuration``
of its own (the client's global default configuration is never read or
written), and its API rate. ``Cluster.token`` requests service-account tokens;
``Cluster.run_as`` gives the same cluster acting as a service account.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
import attrs

from pando_runtime import AdapterFailed, AdapterUnavailable, InvalidInput, NotFound, Problem

from ._errors import ApiError
from ._kubeconfig import ClusterProblem, MergedKubeconfig, kubeconfig_paths
from ._tokens import MIN_TTL, RequestedToken, ServiceAccountToken, acting_as, request_token

if TYPE_CHECKING:
    from kubernetes.client import Configuration

__all__ = [
    "IN_CLUSTER",
    "SERVICE_ACCOUNT_DIR",
    "ApiRate",
    "Cluster",
    "ClusterProblem",
    "ClusterSet",
    "ServiceAccountToken",
]

IN_CLUSTER: Final = "in-cluster"
"""The name of the cluster a pod runs in, reached with its own service account."""
SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a pod finds its service account's ``token``, ``ca.crt`` and ``namespace``."""
SERVICE_HOST_ENV: Final = "KUBERNETES_SERVICE_HOST"
"""Set in every pod: a process that has it runs in a cluster (the client's own test)."""
NO_CLUSTER_REMEDY = "Set 'kubeconfig'/'context', or run inside a cluster."


@attrs.frozen(kw_only=True)
class ApiRate:
    """How fast one cluster may be called: a token bucket of ``burst`` refilled at ``qps``."""

    qps: float = 50.0
    burst: int = 100


def _require_ttl(ttl: int) -> None:
    if ttl < MIN_TTL:
        raise InvalidInput(
            "token lifetime too short",
            [Problem("ttl", f"must be at least {MIN_TTL} seconds (the API server's minimum)")],
        )


def _token_error(error: ApiError, cluster: str) -> Exception:
    details = {"cluster": cluster, "status": error.status}
    message = f"cluster {cluster!r}: {error.reason}"
    if error.status == 0:
        return AdapterUnavailable(message, details=details)
    if error.status == 404:  # noqa: PLR2004
        return NotFound(message, remedy="Create the service account first.", details=details)
    return AdapterFailed(
        message,
        remedy="Grant 'create' on serviceaccounts/token for that account to this identity.",
        details=details,
    )


@attrs.frozen(eq=False)
class Cluster:
    """One cluster: its name, its client configuration and its API rate.

    ``configuration`` is a client ``Configuration`` of this cluster alone (it
    carries credentials: it is left out of the ``repr``). Give it to
    :class:`~pando_runtime_kubernetes.KubeTransport` or to the official client.
    """

    name: str
    configuration: Configuration = attrs.field(repr=False)
    rate: ApiRate = ApiRate()
    source: str = ""
    """The kubeconfig file of its context, or the service-account directory."""
    namespace: str | None = None
    """The context's namespace (in-cluster: the pod's own), if known."""
    identity: str | None = None
    """``system:serviceaccount:<ns>:<name>`` when acting as a service account; else ``None``
    (the kubeconfig's user, or the pod's account)."""

    @classmethod
    def load(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        rate: ApiRate | None = None,
        in_cluster: bool | None = None,
        environ: Mapping[str, str] | None = None,
        service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT_DIR,
    ) -> Cluster:
        """Load one cluster: ``context`` of the kubeconfig files, else the default one.

        Only that context's credentials are loaded (an exec plugin of another
        context does not run). Raises ``AdapterUnavailable`` naming the file,
        the context and the reason when it cannot be loaded.
        """
        clusters = ClusterSet.load(
            kubeconfig,
            contexts=_DEFAULT_ONLY if context is None else (context,),
            in_cluster=in_cluster,
            default_rate=rate or ApiRate(),
            environ=environ,
            service_account_dir=service_account_dir,
        )
        return clusters.cluster(context)

    def with_rate(self, rate: ApiRate) -> Cluster:
        """The same cluster called at another rate."""
        return attrs.evolve(self, rate=rate)

    async def token(
        self,
        audience: str | None,
        *,
        namespace: str,
        service_account: str,
        ttl: int = 3600,
    ) -> ServiceAccountToken:
        """A token for ``service_account`` valid for ``audience``, as ``kubectl create token``.

        ``audience`` ``None`` means the API server's own audiences. ``ttl`` is the
        lifetime asked for, in seconds (at least 600); the API server may grant
        less, so read ``expires_at``. Errors are coded (``NotFound`` for a missing
        account, ``AdapterFailed`` when refused, ``AdapterUnavailable`` when the
        API server cannot be reached) and never hold a token.
        """
        _require_ttl(ttl)
        try:
            return await anyio.to_thread.run_sync(
                lambda: request_token(
                    self.configuration,
                    namespace=namespace,
                    service_account=service_account,
                    audiences=() if audience is None else (audience,),
                    ttl=ttl,
                ),
                limiter=anyio.CapacityLimiter(1),
            )
        except ApiError as error:
            raise _token_error(error, self.name) from None

    async def run_as(self, namespace: str, service_account: str, *, ttl: int = 3600) -> Cluster:
        """This cluster acting as ``namespace/service_account`` for every call made through it.

        Authenticates with a token requested for the account (needs ``create``
        on ``serviceaccounts/token`` for it, not ``impersonate``), requested
        again before it expires. The first token is requested now, so a refusal
        surfaces here; a later refusal while the token still holds is retried.
        """
        _require_ttl(ttl)
        source = RequestedToken(self.configuration, namespace, service_account, ttl=ttl)
        try:
            configuration = await anyio.to_thread.run_sync(
                acting_as, self.configuration, source, limiter=anyio.CapacityLimiter(1)
            )
        except ApiError as error:
            raise _token_error(error, self.name) from None
        return attrs.evolve(
            self,
            configuration=configuration,
            namespace=namespace,
            identity=f"system:serviceaccount:{namespace}:{service_account}",
        )


_DEFAULT_ONLY: Final[tuple[str, ...]] = ("\0default",)
"""``contexts`` selecting the default context alone (its name is not known before reading)."""


def _load_in_cluster(
    directory: Path, environ: Mapping[str, str], rate: ApiRate
) -> Cluster | ClusterProblem:
    # The client is imported when a cluster is loaded, not with the adapter.
    from kubernetes.client import Configuration  # noqa: PLC0415
    from kubernetes.config import incluster_config  # noqa: PLC0415
    from kubernetes.config.config_exception import ConfigException  # noqa: PLC0415

    configuration = Configuration()
    try:
        incluster_config.InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=str(directory / "token"),
            cert_filename=str(directory / "ca.crt"),
            environ=environ,
        ).load_and_set(configuration)
    except (ConfigException, OSError, ValueError) as error:
        return ClusterProblem(str(directory), IN_CLUSTER, str(error))
    namespace_file = directory / "namespace"
    try:
        namespace = namespace_file.read_text(encoding="utf-8").strip() or None
    except OSError:
        namespace = None
    return Cluster(IN_CLUSTER, configuration, rate, str(directory), namespace)


@attrs.frozen
class ClusterSet:
    """Every cluster this process can address by name, the default one, and what failed.

    Load it with :meth:`load`. Iterating yields the clusters, the default first.
    """

    clusters: Mapping[str, Cluster]
    """The loaded clusters by name."""
    default_name: str | None
    """The current context (if it loaded), else ``in-cluster`` when no context is current."""
    problems: tuple[ClusterProblem, ...] = ()
    """Files and contexts that could not be loaded, with the reason."""
    files: tuple[str, ...] = ()
    """The kubeconfig files read, in precedence order."""

    @classmethod
    def load(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        contexts: Collection[str] | None = None,
        in_cluster: bool | None = None,
        rates: Mapping[str, ApiRate] | None = None,
        default_rate: ApiRate | None = None,
        environ: Mapping[str, str] | None = None,
        service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT_DIR,
    ) -> ClusterSet:
        """Load the clusters of the kubeconfig files, and in-cluster.

        Files: ``kubeconfig`` alone if given; else the files of ``$KUBECONFIG``,
        merged as kubectl merges them; else ``~/.kube/config``. Every context is
        loaded (credentials included: exec plugins run, token files are read)
        unless ``contexts`` names the ones wanted. ``in_cluster``: ``None`` adds
        the pod's own service account when running in a pod and no explicit
        ``kubeconfig`` is given; ``True`` always tries; ``False`` never.
        ``rates`` gives the API rate per cluster name (others get
        ``default_rate``). Blocking (reads files, may run plugins): call it in a
        worker thread from async code. Never raises for a broken file or
        context: see :attr:`problems`.
        """
        env = os.environ if environ is None else environ
        merged = MergedKubeconfig.read(
            kubeconfig_paths(kubeconfig, env), report_missing=kubeconfig is not None
        )
        default_only = contexts is not None and tuple(contexts) == _DEFAULT_ONLY
        named = None if contexts is None or default_only else list(contexts)
        builder = _Builder(merged, dict(rates or {}), default_rate or ApiRate())
        builder.check_rates()
        current = merged.current_context
        if default_only:
            wanted = [current] if current else []
        else:
            wanted = merged.contexts if named is None else [n for n in named if n != IN_CLUSTER]
        for name in wanted:
            builder.add_context(name)
        if in_cluster is None:
            in_pod = bool(env.get(SERVICE_HOST_ENV))
            in_cluster = (named is not None and IN_CLUSTER in named) or (
                kubeconfig is None and in_pod
            )
        if named is None:
            in_cluster = in_cluster and (not default_only or current is None)
        if in_cluster and (named is None or IN_CLUSTER in named):
            builder.add_in_cluster(Path(service_account_dir), env)
        builder.check_current(wanted)
        return cls(
            builder.clusters,
            builder.default(named),
            tuple(builder.problems),
            tuple(map(str, merged.files)),
        )

    def names(self) -> tuple[str, ...]:
        """Cluster names, the default first."""
        rest = [name for name in self.clusters if name != self.default_name]
        return (self.default_name, *rest) if self.default_name else tuple(rest)

    def __iter__(self) -> Iterator[Cluster]:
        return (self.clusters[name] for name in self.names())

    def __len__(self) -> int:
        return len(self.clusters)

    def __contains__(self, name: object) -> bool:
        return name in self.clusters

    @property
    def default(self) -> Cluster:
        """The default cluster; ``AdapterUnavailable`` (with the problems) when there is none."""
        return self.cluster()

    def cluster(self, name: str | None = None) -> Cluster:
        """The cluster called ``name`` (the default when ``None``).

        Raises ``AdapterUnavailable`` naming the file, the context and the reason
        when it failed to load or there is no default; ``NotFound`` when nothing
        of that name was ever found.
        """
        target = self.default_name if name is None else name
        if target is not None and target in self.clusters:
            return self.clusters[target]
        related = [p for p in self.problems if name is None or p.context in (target, None)]
        details: dict[str, Any] = {
            "cluster": target,
            "known": list(self.names()),
            "problems": [str(p) for p in self.problems],
        }
        if related or name is None:
            why = "; ".join(map(str, related)) or (
                "no current context, and not running in a cluster"
                if self.files
                else "no kubeconfig found and not running in a cluster"
            )
            raise AdapterUnavailable(
                f"no usable Kubernetes configuration: {why}",
                remedy=NO_CLUSTER_REMEDY,
                details=details,
            )
        raise NotFound(
            f"no cluster named {name!r}; known: {', '.join(self.names()) or 'none'}",
            remedy="Name a context of the kubeconfig files, or 'in-cluster'.",
            details=details,
        )


@attrs.define
class _Builder:
    """A cluster set being loaded: what loaded, and what did not."""

    merged: MergedKubeconfig
    rates: dict[str, ApiRate]
    base_rate: ApiRate
    clusters: dict[str, Cluster] = attrs.field(factory=dict)
    problems: list[ClusterProblem] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.problems = list(self.merged.problems)

    def check_rates(self) -> None:
        unknown = sorted(set(self.rates) - set(self.merged.contexts) - {IN_CLUSTER})
        if unknown:
            raise InvalidInput(
                "API rates given for unknown clusters",
                [Problem(f"rates[{name!r}]", "no cluster of that name") for name in unknown],
            )

    def add_context(self, name: str) -> None:
        merged = self.merged
        if name not in merged.contexts:
            reason = "no such context" if merged.files else "no kubeconfig file found"
            if name == merged.current_context:
                reason = "current-context names no context"
            self.problems.append(ClusterProblem(merged.source(name), name, reason))
            return
        try:
            configuration = merged.load(name)
        except Exception as error:  # noqa: BLE001 - any loader failure is this context's
            self.problems.append(ClusterProblem(merged.source(name), name, _reason(error)))
            return
        rate = self.rates.get(name, self.base_rate)
        source, namespace = merged.source(name), merged.namespace(name)
        self.clusters[name] = Cluster(name, configuration, rate, source, namespace)

    def add_in_cluster(self, directory: Path, environ: Mapping[str, str]) -> None:
        if IN_CLUSTER in self.clusters:  # a kubeconfig context of that name came first
            return
        loaded = _load_in_cluster(directory, environ, self.rates.get(IN_CLUSTER, self.base_rate))
        if isinstance(loaded, Cluster):
            self.clusters[IN_CLUSTER] = loaded
        else:
            self.problems.append(loaded)

    def check_current(self, wanted: Collection[str]) -> None:
        current = self.merged.current_context
        if current is not None and current not in self.merged.contexts and current not in wanted:
            where = self.merged.source(current)
            self.problems.append(ClusterProblem(where, current, "current-context names no context"))

    def default(self, named: list[str] | None) -> str | None:
        current = self.merged.current_context
        if current in self.clusters:
            return current
        if named is not None:
            return next((name for name in named if name in self.clusters), None)
        if current is None and IN_CLUSTER in self.clusters:
            return IN_CLUSTER
        return None


def _reason(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
