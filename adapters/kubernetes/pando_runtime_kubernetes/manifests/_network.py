"""The network of app and trial namespaces, from the settings: what their pods may reach.

:class:`AppNetwork` turns the egress settings (``pod_cidr``, ``service_cidr``,
``api_server_cidr``, ``dns_namespace``, ``dns_labels``, ``egress_gateway_image``) into what
every namespace needs: the egress rules of its policy, and for a plan whose rules name hosts
the egress gateway's configuration, namespace-wide objects, pod and proxy variables. Its
settings are checked once, when the adapter is made: a bad one is :class:`InvalidConfig`
naming it. It does no I/O (:class:`~pando_runtime_kubernetes._gateways.EgressGateways`
converges the gateway's pod).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pando_runtime import EgressPolicy, InvalidConfig, Problem, WorkloadPlan
from pando_runtime.plugin import is_valid_image

from .._info import KubernetesConfig
from . import _workload_objects as workload_objects
from ._egress import ClusterRanges, DnsPeer, egress_rules, gateway_policy, rule_problems
from ._gateway import GATEWAY, gateway_config, gateway_objects, gateway_pod, proxy_env

__all__ = ["AppNetwork"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_CIDR_SETTINGS = ("pod_cidr", "service_cidr", "api_server_cidr", "node_cidr")


def _setting_problems(config: KubernetesConfig) -> list[Problem]:
    problems = []
    for name in _CIDR_SETTINGS:
        value: str | None = getattr(config, name)
        for part in (value or "").split(","):
            try:
                if part.strip():
                    ipaddress.ip_network(part.strip(), strict=False)
            except ValueError:
                problems.append(
                    Problem(name, f"{part.strip()!r} is not a CIDR block", "invalid_cidr")
                )
    if not _DNS_LABEL.match(config.dns_namespace):
        problems.append(
            Problem("dns_namespace", f"{config.dns_namespace!r} is not a namespace name")
        )
    if not config.dns_labels:
        problems.append(
            Problem("dns_labels", "name at least one label of the DNS pods", "required")
        )
    image = config.egress_gateway_image
    if image is not None and not is_valid_image(image):
        problems.append(
            Problem("egress_gateway_image", f"{image!r} is not an image reference", "invalid_image")
        )
    return problems


class AppNetwork:
    """What the pods of app and trial namespaces may reach, as the settings say.

    Raises:
        InvalidConfig: a setting is malformed (each problem names its setting).
    """

    def __init__(self, config: KubernetesConfig) -> None:
        problems = _setting_problems(config)
        if problems:
            raise InvalidConfig(
                "the network settings are not valid",
                problems,
                remedy="Fix each named setting: CIDR blocks such as 10.96.0.0/12, "
                "comma-separated; a namespace name; at least one DNS pod label; an image.",
            )
        self.ranges = ClusterRanges.from_settings(
            config.pod_cidr, config.service_cidr, config.api_server_cidr, config.node_cidr
        )
        """What app pods never reach outside their namespace."""
        self.dns = DnsPeer(config.dns_namespace, dict(config.dns_labels))
        self.gateway_image = config.egress_gateway_image
        self._domain = config.cluster_domain
        self._settings = workload_objects.PodSettings(config.runtime_class, config.node_selector)

    def details(self) -> dict[str, str]:
        """What the health check reports of the ranges in effect and where they come from."""
        return self.ranges.details()

    def problems(
        self, egress: EgressPolicy | None, path: str, workloads: Sequence[WorkloadPlan] = ()
    ) -> list[Problem]:
        """What no capability check catches, each by its path.

        That is a rule for the metadata address or inside the nodes' or the API server's
        range, and a workload named as the gateway in a plan that needs one.
        """
        problems = rule_problems(egress, path, self.ranges.forbidden)
        if self.config_of(egress) is not None:
            problems += [
                Problem(
                    f"workloads[{i}].name", f"{GATEWAY!r} is the egress gateway's name", "reserved"
                )
                for i, w in enumerate(workloads)
                if w.name == GATEWAY
            ]
        return problems

    def policy_rules(self, egress: EgressPolicy | None) -> list[dict[str, Any]]:
        """The egress rules of a namespace's policy (every pod in it)."""
        return egress_rules(egress, self.ranges, self.dns)

    def config_of(self, egress: EgressPolicy | None) -> str | None:
        """The gateway's configuration for ``egress``; ``None``: no gateway."""
        return gateway_config(egress, self.ranges)

    def gateway_objects(
        self, ns: str, bundle_id: str, egress: EgressPolicy | None, labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """The gateway's namespace-wide objects (Service, ConfigMap, policy), in write order.

        Empty when no rule names a host. The Service comes first: while it exists, the
        adapter knows a gateway may be there to remove.
        """
        config = self.config_of(egress)
        if config is None:
            return []
        policy = gateway_policy(ns, labels, egress, self.ranges, self.dns)
        assert policy is not None  # noqa: S101 - a configuration means host rules
        return [*gateway_objects(ns, bundle_id, config, labels=labels), policy]

    def gateway_pod(
        self, ns: str, digest: str, labels: Mapping[str, str], replaces: str | None
    ) -> dict[str, Any]:
        """The gateway's pod running the configuration of ``digest``."""
        assert self.gateway_image is not None  # noqa: S101 - host rules need the image
        placement: dict[str, Any] = {}
        workload_objects.place(placement, self._settings)
        return gateway_pod(
            ns,
            digest,
            image=self.gateway_image,
            labels=labels,
            placement=placement,
            replaces=replaces,
        )

    def proxy_env(
        self, ns: str, egress: EgressPolicy | None, workloads: Sequence[str]
    ) -> dict[str, str]:
        """The proxy variables of the namespace's app pods; empty without a gateway."""
        return proxy_env(ns, self._domain, egress, sorted(workloads))
