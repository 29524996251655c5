"""Trial runs: an image run once in a namespace of its own that admits no connection.

Its outbound traffic is held to the rules of the app it is tried for (its egress policy
as an app namespace's, and a gateway of its own when the rules name hosts).

The pod holds the image's container and an ``observer`` (the helper image)
that shares its network namespace, as every container of a pod does. The
adapter execs into the observer to read ``/proc/net/{tcp,tcp6,udp,udp6}``:
sockets in ``LISTEN`` (TCP) or unconnected (UDP) are the ports the image
listens on, loopback ones reported apart. It polls until the image exits,
listens on a routable address, or the trial's time is up (a server still up
then passes). Writes are not observed. The namespace is deleted on every path.

A trial whose ``isolation_floor`` is sandboxed runs under the sandbox's RuntimeClass with no
observer: its sockets live in the sandbox's own network stack (gVisor's netstack, Kata's
guest kernel), so the node's ``/proc/net`` shows none of them, and an observer inside the
sandbox would report what the sandboxed app's kernel says. Its ports are not observed.
"""

from __future__ import annotations

import math
from typing import Any

import anyio

from pando_runtime import (
    AdapterFailed,
    AdapterUnavailable,
    Port,
    RateLimited,
    TrialRequest,
    TrialResult,
)
from pando_runtime.plugin import SOCKET_TABLES_SCRIPT, listening_ports, split_socket_tables

from .._info import KubernetesConfig
from .._names import (
    LABEL_BUNDLE,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    PULL_SECRET,
    ROLE_TRIAL,
    bundle_label,
    env_secret_name,
    trial_namespace,
)
from ..api._paths import api_path
from ..cache._podstatus import container_state, start_problem
from ..manifests import _namespace_objects as ns_objects
from ..manifests import _objects as objects
from ..manifests import _workload_objects as workload_objects
from ..manifests._gateway import config_digest
from ..manifests._network import AppNetwork
from ..manifests._security import container_security
from ..session._session import ClusterSession
from ._sandbox import SandboxClasses

__all__ = ["TRIAL_LOG_LIMIT", "Trials", "listening_ports", "trial_objects"]

TRIAL_LOG_LIMIT = 64 * 1024
APP, OBSERVER = "app", "observer"
OBSERVE_SCRIPT = SOCKET_TABLES_SCRIPT


def trial_objects(
    request: TrialRequest,
    *,
    subject: str | None,
    role: str,
    observer_image: str,
    settings: workload_objects.PodSettings,
    wait: float,
    network: AppNetwork,
    observe: bool = True,
) -> list[dict[str, Any]]:
    """The objects of a trial, in write order.

    ``observe``: the pod holds an observer beside the image (not under a sandbox).

    Namespace, binding, policy, secrets, the gateway when the rules name hosts, the pod.

    The policy admits nothing and lets the trial reach what the app's rules (``egress``)
    would let the app reach, through a gateway of its own for host names.
    """
    ns = trial_namespace(request.trial_id)
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ROLE: ROLE_TRIAL}
    meta = {"labels": labels, "namespace": ns}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "labels": {**labels, "pod-security.kubernetes.io/enforce": "baseline"},
            },
        }
    ]
    if subject:
        binding = ns_objects.role_binding(ns, request.trial_id, subject, role)
        binding["metadata"]["labels"] = dict(labels)
        docs.append(binding)
    docs.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "pando-trial-deny", **meta},
            # Ingress with no rule: nothing may connect to the trial.
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "egress": network.policy_rules(request.egress),
            },
        }
    )
    config = network.config_of(request.egress)
    if config is not None:
        mine = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_BUNDLE: bundle_label(request.trial_id)}
        docs += network.gateway_objects(ns, request.trial_id, request.egress, mine)
        docs.append(network.gateway_pod(ns, config_digest(config), mine, None))
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": env_secret_name(APP), **meta},
            "data": {k: objects.b64(v.encode()) for k, v in sorted(request.env.items())},
        }
    )
    if request.pull_auth is not None:
        pull = ns_objects.pull_secret(ns, request.trial_id, [request.pull_auth])
        pull["metadata"]["labels"] = dict(labels)
        docs.append(pull)
    app = workload_objects.app_container(
        APP,
        request.image,
        entrypoint=request.entrypoint,
        command=request.command,
        working_dir=request.working_dir,
    )
    proxy = network.proxy_env(ns, request.egress, [APP])
    if proxy:
        app["env"] = [{"name": k, "value": v} for k, v in sorted(proxy.items())]
    volumes = [{"name": f"w{i}", "emptyDir": {}} for i in range(len(request.declared_paths))]
    if volumes:
        app["volumeMounts"] = [
            {"name": f"w{i}", "mountPath": path} for i, path in enumerate(request.declared_paths)
        ]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "activeDeadlineSeconds": math.ceil(request.timeout_seconds + wait + 60),
        "containers": [app],
    }
    if observe:
        spec["containers"].append(
            {
                "name": OBSERVER,
                "image": observer_image,
                "command": ["sleep", str(math.ceil(request.timeout_seconds + wait + 60))],
                "securityContext": container_security(),
            }
        )
    if volumes:
        spec["volumes"] = volumes
    if request.pull_auth is not None:
        spec["imagePullSecrets"] = [{"name": PULL_SECRET}]
    workload_objects.place(spec, settings)
    docs.append(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trial", **meta}, "spec": spec}
    )
    return docs


class Trials:
    """Trial runs on one cluster."""

    def __init__(
        self,
        session: ClusterSession,
        config: KubernetesConfig,
        network: AppNetwork,
        sandbox: SandboxClasses,
    ) -> None:
        self._session = session
        self._config = config
        self._network = network
        self._sandbox = sandbox

    async def trial(self, request: TrialRequest) -> TrialResult:
        """Run the image once, alone; report its ports, exit code and first 64 KiB of log.

        ``request`` is valid for the adapter's capabilities (the adapter checks). A log that
        cannot be read raises :class:`AdapterUnavailable` (``RateLimited`` when throttled),
        with the exit code and ports seen in its details: never an empty log in its place.
        """
        isolation = self._sandbox.isolation()
        if request.isolation_floor > isolation:
            raise AdapterFailed(
                f"the trial needs isolation {request.isolation_floor.name.lower()}; "
                f"this cluster gives {isolation.name.lower()}",
            )
        c = self._config
        ns = trial_namespace(request.trial_id)
        settings = self._sandbox.pod_settings(request.isolation_floor)
        sandboxed = settings.runtime_class is not None and settings.runtime_class == (
            self._sandbox.name
        )
        docs = trial_objects(
            request,
            subject=c.app_subject,
            role=c.app_role,
            observer_image=c.helper_image,
            settings=settings,
            wait=c.helper_wait,
            network=self._network,
            observe=not sandboxed,
        )
        await self._session.connection.transport()  # no cluster: nothing to clean up either
        try:
            for doc in docs:
                stored = await self._session.writer.create(doc)
                if doc["kind"] == "Pod" and doc["metadata"]["name"] == "trial":
                    self._sandbox.admitted(stored, settings)  # the namespace goes below
            return await self._watch_trial(ns, request)
        finally:
            with anyio.CancelScope(shield=True):
                await self._session.writer.delete(None, "namespaces", ns)

    async def _watch_trial(self, ns: str, request: TrialRequest) -> TrialResult:  # noqa: C901 - one polling loop
        session = self._session
        wait = self._config.helper_wait
        pod_path = api_path(ns, "pods", "trial")
        started = False
        exit_code: int | None = None
        routable: set[Port] = set()
        loopback: set[Port] = set()
        # First wait for the containers to start (image pull, scheduling), then the trial's time.
        with anyio.move_on_after(wait):
            while not started:
                body = await session.api.get(pod_path, "read the trial pod")
                app = container_state(body, APP)
                if app.get("running") or app.get("terminated"):
                    started = True
                    break
                problem = start_problem(body, APP)
                if problem:
                    return TrialResult(
                        started=False, log=f"the trial does not start: {problem}".encode()
                    )
                await anyio.sleep(0.2)
        if not started:
            message = f"the trial did not start within {wait:.0f} s"
            return TrialResult(started=False, log=message.encode())
        with anyio.move_on_after(request.timeout_seconds):
            while True:
                body = await session.api.get(pod_path, "read the trial pod")
                terminated = container_state(body, APP).get("terminated")
                if terminated is not None:
                    exit_code = terminated.get("exitCode")
                    break
                if container_state(body, OBSERVER).get("running"):  # none under a sandbox
                    code, out, _ = await session.streams.exec_output(
                        ns, "trial", OBSERVER, ("sh", "-c", OBSERVE_SCRIPT)
                    )
                    if code == 0:
                        seen, local = listening_ports(
                            split_socket_tables(out.decode(errors="replace"))
                        )
                        routable |= seen
                        loopback |= local
                        if routable:
                            break  # it serves: what it listens on is what the trial is for
                await anyio.sleep(0.5)
        observed = tuple(sorted(routable, key=lambda p: (p.number, p.protocol.value)))
        try:
            log = await session.streams.read_log(ns, "trial", APP, TRIAL_LOG_LIMIT)
        except (AdapterUnavailable, RateLimited) as unreadable:
            # A result has no way to say "log unknown": an empty log would claim the image
            # wrote nothing. What was seen before goes in the error's details.
            unreadable.details.update(
                exit_code=exit_code,
                observed_ports=[f"{p.number}/{p.protocol.value}" for p in observed],
            )
            raise
        return TrialResult(
            started=True,
            exit_code=exit_code,
            observed_ports=observed,
            loopback_ports=tuple(
                sorted(loopback - routable, key=lambda p: (p.number, p.protocol.value))
            ),
            log=log[:TRIAL_LOG_LIMIT],
        )
