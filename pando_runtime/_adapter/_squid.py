"""The egress gateway's configuration: Squid passing exactly a plan's egress rules.

Every adapter in this project that restricts egress to host names does it with a forward proxy
beside the app (host-name rules cannot be address filters: a name's addresses change), and that
proxy is Squid: every distribution packages it, it matches CONNECT tunnels and plain requests
alike on host name and port, refuses by destination address after its own lookup, and reads its
whole configuration from one file. The file is written here, from the contract's rules, so each
adapter's gateway passes the same requests and refuses the same ones. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._contract._plans import EgressRule

__all__ = ["squid_config"]

_LITERALS = (r"^[0-9.]+$", r"^\[[0-9a-fA-F:.]+\]$", r"^[0-9a-fA-F:]+:[0-9a-fA-F:.]*$")
"""What an address literal looks like in a request: IPv4, bracketed or bare IPv6."""

_QUIET = (
    "pid_filename none",
    "cache deny all",
    "cache_mem 0 MB",
    "access_log stdio:/dev/stdout",
    "cache_log stdio:/dev/stderr",
    "cache_store_log none",
    "logfile_rotate 0",
    "shutdown_lifetime 1 seconds",
    "forwarded_for delete",
    "httpd_suppress_version_string on",
)
"""A proxy that keeps nothing: no cache, no pid file, logs to its output, a quick stop, and
nothing of the app (its address) or of Squid (its version) added to what it forwards."""


def _ports(rule: EgressRule) -> str:
    return " ".join(str(port) for port in sorted(set(rule.ports)))


def _allow(lines: list[str], name: str, condition: str, rule: EgressRule) -> None:
    allow = f"http_access allow {condition} {name}"
    if rule.ports:
        lines.append(f"acl {name}_port port {_ports(rule)}")
        allow += f" {name}_port"
    lines.append(allow)


def squid_config(rules: Sequence[EgressRule], *, listen: str, refused: Sequence[str]) -> str:
    """``squid.conf`` passing exactly ``rules``; everything else gets 403.

    Args:
        rules: the rules the gateway passes: a host-name rule passes requests naming that host
            (on the rule's ports, every port when it names none); a CIDR rule passes requests
            naming an address literal inside it. An adapter that lets CIDR rules through by
            other means (an address filter) gives only its host-name rules.
        listen: Squid's ``http_port``: a port, or ``address:port``.
        refused: address ranges a listed host name must not resolve into (the runtime's own
            networks, private and link-local ranges): refused after Squid's lookup, unless a
            CIDR rule names the address literally.

    Order: a request naming a host that no rule lists is refused before any lookup; address
    literals inside a CIDR rule pass on its ports; a name resolving into ``refused`` is
    refused; each host rule passes on its ports; the rest is refused. Names are matched
    without reverse lookups (``dstdomain -n``), so an address literal never passes as a name.
    """
    lines = [
        "# The egress gateway of one pando app, written from its plan's egress rules.",
        f"http_port {listen}",
        *_QUIET,
        "acl literal dstdom_regex -n " + " ".join(_LITERALS),
    ]
    names = sorted({rule.destination.lower() for rule in rules if not rule.is_cidr})
    if names:
        lines.append("acl listed dstdomain -n " + " ".join(names))
        lines.append("http_access deny !literal !listed")
    else:
        lines.append("http_access deny !literal")
    for i, rule in enumerate(rules):
        if rule.is_cidr:
            lines.append(f"acl rule{i} dst {rule.destination}")
            _allow(lines, f"rule{i}", "literal", rule)
    if refused:
        lines.append("acl refused dst " + " ".join(refused))
        lines.append("http_access deny refused")
    for i, rule in enumerate(rules):
        if not rule.is_cidr:
            lines.append(f"acl rule{i} dstdomain -n {rule.destination.lower()}")
            _allow(lines, f"rule{i}", "!literal", rule)
    lines.append("http_access deny all")
    return "\n".join(lines) + "\n"
