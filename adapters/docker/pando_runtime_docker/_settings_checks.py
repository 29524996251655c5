"""The Docker adapter's settings checked before anything is dialled: every problem at its path."""

from __future__ import annotations

import ipaddress
import re

from pando_runtime import Problem

from ._info import DockerConfig, UpstreamMode
from .endpoint import Endpoint, resolve_endpoint
from .features import runtime_problems
from .manifests import Authority, certificates_in

__all__ = ["config_problems"]

_OWNER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,60}[a-z0-9])?$")
_DNS_NAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+$")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return bool(_DNS_NAME.match(text))
    return True


def _agent_problems(config: DockerConfig) -> list[Problem]:
    """What upstream_mode 'agent' needs: an image, an address, readable PEM settings."""
    problems = []
    if config.upstream_mode == UpstreamMode.AGENT:
        if not config.agent_image:
            problems.append(Problem("agent_image", "upstream_mode 'agent' needs the agent's image"))
        if not config.agent_address:
            problems.append(
                Problem("agent_address", "upstream_mode 'agent' needs the engine's address")
            )
    if config.agent_address and not _is_address(config.agent_address):
        problems.append(
            Problem(
                "agent_address",
                "an IP address or a DNS name, without scheme or port",
                "bad_address",
            )
        )
    if config.agent_ca is not None:
        try:
            Authority.from_pem(config.agent_ca)
        except ValueError as error:  # the message never quotes the key
            problems.append(Problem("agent_ca", str(error), "bad_authority"))
    if config.agent_trusted_cas is not None:
        try:
            certificates_in(config.agent_trusted_cas)
        except ValueError as error:
            problems.append(Problem("agent_trusted_cas", str(error), "bad_certificate"))
    return problems


def config_problems(config: DockerConfig) -> tuple[Endpoint | None, list[Problem]]:
    """The engine the settings name, and every problem of the settings, each at its path."""
    endpoint, problems = resolve_endpoint(config)
    if not _OWNER.match(config.owner):
        problems.append(Problem("owner", "lowercase letters, digits and '-' (32 at most)"))
    if not _PREFIX.match(config.label_prefix):
        problems.append(Problem("label_prefix", "a reverse-DNS label prefix such as io.pando"))
    if config.upstream_mode not in {m.value for m in UpstreamMode}:
        problems.append(
            Problem("upstream_mode", "one of " + ", ".join(m.value for m in UpstreamMode))
        )
    elif config.upstream_mode == UpstreamMode.PROXY_CONTAINER and not config.proxy_container:
        problems.append(
            Problem("proxy_container", "upstream_mode 'proxy_container' needs a container name")
        )
    problems += runtime_problems(config.oci_runtime, config.sandbox_runtime)
    return endpoint, problems + _agent_problems(config)
