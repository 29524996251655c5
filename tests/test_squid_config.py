"""The egress gateway's Squid configuration, as every adapter's gateway writes it."""

from __future__ import annotations

from pando_runtime import EgressRule
from pando_runtime.plugin import squid_config


def _access(config: str) -> list[str]:
    return [line for line in config.splitlines() if line.startswith("http_access")]


def test_no_refused_ranges_writes_no_empty_address_list() -> None:
    config = squid_config([EgressRule(destination="api.example.com")], listen="3128", refused=())
    assert "acl refused" not in config, "Squid refuses an acl with no value"
    assert _access(config) == [
        "http_access deny !literal !listed",
        "http_access allow !literal rule0",
        "http_access deny all",
    ]


def test_the_listen_address_is_squids_http_port() -> None:
    config = squid_config([], listen="127.0.0.1:3999", refused=("10.0.0.0/8",))
    assert config.splitlines()[1] == "http_port 127.0.0.1:3999"
    assert _access(config) == [
        "http_access deny !literal",
        "http_access deny refused",
        "http_access deny all",
    ], "no rule: every request refused"


def test_a_cidr_rule_passes_address_literals_before_the_refused_ranges() -> None:
    rules = [EgressRule(destination="10.1.2.3/32", ports=(5432, 5432, 80))]
    config = squid_config(rules, listen="3128", refused=("10.0.0.0/8",))
    assert "acl rule0 dst 10.1.2.3/32" in config.splitlines()
    assert "acl rule0_port port 80 5432" in config.splitlines()
    assert _access(config) == [
        "http_access deny !literal",
        "http_access allow literal rule0 rule0_port",
        "http_access deny refused",
        "http_access deny all",
    ]
