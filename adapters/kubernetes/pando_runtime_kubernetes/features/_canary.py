"""The NetworkPolicy canary: does this cluster enforce the policies app isolation rests on?

In a namespace of its own, a server pod admits (by NetworkPolicy) only pods labelled
``pando.dev/canary-admitted``. Probes try to fetch from it: the admitted one must get
through (else the check proves nothing: no network, or a slow cluster) and the other must not.
Only then is enforcement of ingress rules verified. A third probe is admitted too, but a
policy denies it all egress: when it cannot get through either, egress rules are enforced
as well (what restricted egress rests on). The namespace is deleted on every path.

It runs when its answer is first needed, once (unless ``trust_network_policy`` skips it):
the first ``capabilities()``, the first plan or trial restricting egress, or the health check
(which runs it again until enforcement is verified). Concurrent callers share one run. So a
capability the cluster has is never refused before the canary looked; when it is refused
after, the refusal's remedy says what the canary found.

Its result is logged on ``pando_runtime.kubernetes.canary``: INFO when enforcement is verified,
WARNING when it is not (with why).
"""

from __future__ import annotations

import secrets
from typing import Any

import anyio

from pando_runtime import PandoRuntimeError

from .._info import KubernetesConfig
from .._log import logger
from .._names import LABEL_MANAGED_BY, LABEL_ROLE, MANAGED_BY, ROLE_CANARY
from ..api._paths import api_path
from ..manifests import _namespace_objects as ns_objects
from ..manifests import _workload_objects as workload_objects
from ..manifests._security import container_security
from ..session._session import ClusterSession

__all__ = ["NetworkPolicyCanary", "canary_objects"]

_LOG = logger("canary")

ADMITTED = "pando.dev/canary-admitted"
EGRESS_DENIED = "pando.dev/canary-egress-denied"
PORT = 8080
SERVER, ADMITTED_PROBE, DENIED_PROBE = "server", "admitted", "denied"
EGRESS_PROBE = "egress-denied"
PROBES = ((ADMITTED_PROBE, True, False), (DENIED_PROBE, False, False), (EGRESS_PROBE, True, True))
"""Each probe: its name, whether ingress admits it, whether egress denies it."""
PROBE_TRIES = 15
"""Fetches a probe makes a second apart: the policy controller's lag on a busy machine."""


def _pod(
    ns: str,
    name: str,
    image: str,
    script: str,
    *,
    labels: dict[str, str],
    placement: workload_objects.PodSettings,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": name,
                    "image": image,
                    "command": ["sh", "-c", script],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "10m", "memory": "16Mi"},
                    },
                    "securityContext": container_security(),
                }
            ],
        },
    }
    # Where app pods run: enforcement is a property of their nodes, not of any node.
    workload_objects.place(pod["spec"], placement)
    return pod


def canary_objects(
    ns: str,
    *,
    image: str,
    subject: str | None,
    role: str,
    placement: workload_objects.PodSettings | None = None,
) -> list[dict[str, Any]]:
    """Namespace, binding, policy and server pod of a canary, in write order."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ROLE: ROLE_CANARY}
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
    ]
    if subject:
        docs.append(ns_objects.role_binding(ns, ns, subject, role))
    docs.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "pando-canary", "namespace": ns, "labels": labels},
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": {ADMITTED: "true"}}}]}],
            },
        }
    )
    docs.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "pando-canary-egress", "namespace": ns, "labels": labels},
            # Egress with no rule: the probe it selects reaches nothing.
            "spec": {
                "podSelector": {"matchLabels": {EGRESS_DENIED: "true"}},
                "policyTypes": ["Egress"],
            },
        }
    )
    serve = f"mkdir -p /tmp/w && echo ok > /tmp/w/index.html && exec httpd -f -p {PORT} -h /tmp/w"
    docs.append(
        _pod(
            ns,
            SERVER,
            image,
            serve,
            labels=dict(labels),
            placement=placement or workload_objects.PodSettings(),
        )
    )
    return docs


def probe(
    ns: str,
    name: str,
    image: str,
    address: str,
    *,
    admitted: bool,
    egress_denied: bool = False,
    placement: workload_objects.PodSettings | None = None,
) -> dict[str, Any]:
    """A pod that exits 0 when it can fetch from the server.

    A policy controller puts a new pod's address into its rules a moment after the pod
    starts, and on a busy machine the first fetch came before that. So an admitted probe tries
    again until it gets through, and the egress-denied one until it is refused: it exits 0
    only when every try of :data:`PROBE_TRIES` got through, as where egress is not enforced
    (one try got through on a busy real node that enforces it). The ingress-denied probe tries
    once: the server's policy is in place before any probe exists.
    """
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ROLE: ROLE_CANARY}
    if admitted:
        labels[ADMITTED] = "true"
    if egress_denied:
        labels[EGRESS_DENIED] = "true"
    fetch = f"wget -q -T 5 -O /dev/null http://{address}:{PORT}/"
    if egress_denied:
        script = f"for i in $(seq {PROBE_TRIES}); do {fetch} || exit 1; sleep 1; done"
    elif admitted:
        script = f"for i in $(seq {PROBE_TRIES}); do {fetch} && exit 0; sleep 1; done; exit 1"
    else:
        script = fetch
    return _pod(
        ns,
        name,
        image,
        script,
        labels=labels,
        placement=placement or workload_objects.PodSettings(),
    )


def _phase(body: dict[str, Any]) -> str:
    return str((body.get("status") or {}).get("phase") or "Pending")


class NetworkPolicyCanary:
    """The canary of one cluster's health check; remembers that enforcement was verified."""

    def __init__(self, session: ClusterSession, config: KubernetesConfig) -> None:
        self._session = session
        self._config = config
        self._placement = workload_objects.PodSettings(config.runtime_class, config.node_selector)
        self.verified = False
        """The canary passed in this process (ingress rules are enforced)."""
        self.egress_verified = False
        """Egress rules are enforced too (known once the canary passed)."""
        self.runs = 0
        """Canary runs begun in this process (each writes a namespace of its own)."""
        self._looked = False
        self._found: str | None = None  # the last run's verdict: why enforcement is unverified
        self._failure: str | None = None  # why the last run could not look (an API error)
        self._lock = anyio.Lock()  # one run at a time: concurrent callers share its answer

    @property
    def skipped(self) -> bool:
        """The settings say enforcement is trusted, so the canary never runs on its own."""
        return self._config.trust_network_policy

    async def problem(self) -> str | None:
        """``None`` when enforcement is verified (now or before), else why not, in plain words.

        Runs the canary again until it verified enforcement (the health check).
        """
        async with self._lock:
            if self.verified:
                return None
            return await self._look()

    async def look_once(self) -> None:
        """Run the canary unless it already looked (or is looking: then wait for that run).

        A run that could not look (the API server failed a call) is logged, and the next
        need tries again; what could be read stays unverified meanwhile.
        """
        if not self._to_look():
            return
        async with self._lock:
            if not self._to_look():  # a run ended while this caller waited for it
                return
            try:
                await self._look()
            except PandoRuntimeError as error:
                self._failure = error.message
                _LOG.warning(
                    "the NetworkPolicy canary could not run: %s",
                    error,
                    extra={"cluster": self._session.connection.log_name},
                )

    def _to_look(self) -> bool:
        return not (self._looked or self.skipped)

    async def _look(self) -> str | None:
        self.runs += 1
        problem = await self._run()
        self._looked, self._found, self._failure = True, problem, None
        extra = {"cluster": self._session.connection.log_name}
        if problem is None:
            _LOG.info("the NetworkPolicy canary passed: policies are enforced", extra=extra)
        else:
            _LOG.warning("the NetworkPolicy canary failed: %s", problem, extra=extra)
        return problem

    def egress_refusal(self) -> str:
        """Why restricted egress is refused here, and what to do: the remedy of the refusal."""
        otherwise = (
            "or set 'trust_egress_policy: true' on a cluster known to enforce NetworkPolicy "
            "egress rules; else plan without restricted egress."
        )
        if self.skipped:
            return (
                "Egress enforcement is unknown: 'trust_network_policy' skips the NetworkPolicy "
                "canary that would find it out. Unset it so the canary looks, " + otherwise
            )
        if self._failure is not None:
            return (
                f"The NetworkPolicy canary could not run ({self._failure}); it runs again at "
                "the next plan that needs it. Fix that, " + otherwise
            )
        if not self._looked:
            return "The NetworkPolicy canary has not run yet: call health_check(), " + otherwise
        found = (
            "the cluster enforces ingress rules but not egress rules (a pod denied all egress "
            "still connected)"
            if self._found is None
            else self._found
        )
        return (
            f"The NetworkPolicy canary looked: {found}. Run a network plugin that enforces "
            "NetworkPolicy egress rules (Calico, Cilium, kube-router), " + otherwise
        )

    async def _run(self) -> str | None:
        c = self._config
        ns = f"pando-canary-{secrets.token_hex(4)}"
        try:
            for doc in canary_objects(
                ns,
                image=c.helper_image,
                subject=c.app_subject,
                role=c.app_role,
                placement=self._placement,
            ):
                await self._session.writer.create(doc)
            with anyio.move_on_after(c.canary_wait):
                verdict = await self._verdict(ns)
                self.verified = verdict is None
                return verdict
            return (
                f"the NetworkPolicy canary did not finish in {c.canary_wait:g} s, "
                "so enforcement could not be verified"
            )
        finally:
            with anyio.CancelScope(shield=True):
                await self._session.writer.delete(None, "namespaces", ns)

    async def _pod(self, ns: str, name: str) -> dict[str, Any]:
        return await self._session.api.get(
            api_path(ns, "pods", name), "read the NetworkPolicy canary"
        )

    async def _verdict(self, ns: str) -> str | None:
        address = ""
        while not address:
            body = await self._pod(ns, SERVER)
            if _phase(body) == "Running":
                address = (body.get("status") or {}).get("podIP") or ""
            if not address:
                await anyio.sleep(0.5)
        for name, admitted, egress_denied in PROBES:
            doc = probe(
                ns,
                name,
                self._config.helper_image,
                address,
                admitted=admitted,
                egress_denied=egress_denied,
                placement=self._placement,
            )
            await self._session.writer.create(doc)
        phases = await self._probe_phases(ns)
        if phases[ADMITTED_PROBE] != "Succeeded":
            return "the canary's admitted probe could not connect either: enforcement unverified"
        if phases[DENIED_PROBE] == "Succeeded":
            return "a pod that NetworkPolicy denies reached the canary: policies are not enforced"
        # Not a failure of the check: restricted egress is then not offered.
        self.egress_verified = phases[EGRESS_PROBE] != "Succeeded"
        return None

    async def _probe_phases(self, ns: str) -> dict[str, str]:
        """How the probes ended (waits until all have)."""
        phases: dict[str, str] = {}
        while True:
            for name, _, _ in PROBES:
                if name in phases:
                    continue
                phase = _phase(await self._pod(ns, name))
                if phase in {"Succeeded", "Failed"}:
                    phases[name] = phase
            if len(phases) == len(PROBES):
                return phases
            await anyio.sleep(0.5)
