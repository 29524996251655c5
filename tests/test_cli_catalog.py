"""``pando-runtime catalog``, run as an operator runs it: the fake's apps into a real Consul."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from localcluster.net import free_ports, wait_until

SCRIPT = Path(sys.executable).parent / "pando-runtime"

BUNDLE = """\
bundle_id: shop
workloads:
  - name: web
    image: nginx:1.27
    ports: [{number: 80}, {number: 8443}]
"""


@pytest.fixture
def cli(tmp_path: Path):
    env = {
        **{k: v for k, v in os.environ.items() if k != "XDG_STATE_HOME"},
        "HOME": str(tmp_path),
        "PANDO_RUNTIME_ADAPTER": "fake",
        "PANDO_RUNTIME_CONFIG": str(tmp_path / "fake.yaml"),
    }
    (tmp_path / "fake.yaml").write_text(f"state_file: {tmp_path / 'world.json'}\n")
    (tmp_path / "shop.yaml").write_text(BUNDLE)

    def run(*args: str, background: bool = False) -> Any:
        argv = [str(SCRIPT), *args]
        if background:
            return subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path
            )
        return subprocess.run(
            argv, capture_output=True, env=env, timeout=120, check=False, cwd=tmp_path
        )

    return run


def _node_services(address: str, node: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{address}/v1/catalog/node-services/{node}") as response:  # noqa: S310
        body = json.loads(response.read())
    return {s["ID"]: s for s in body.get("Services") or ()}


@pytest.mark.consul
def test_sync_once_registers_the_apps_and_cleanup_removes_them(cli, consul_agent: Any) -> None:
    address = consul_agent.http_address
    node = "cli-once"
    assert cli("apply", "shop.yaml").returncode == 0
    synced = cli(
        "catalog",
        "sync",
        "shop.yaml",
        "--once",
        "--catalog",
        "consul",
        "--catalog-set",
        f"address={address}",
        "--node",
        node,
    )
    assert synced.returncode == 0, synced.stderr
    out = synced.stdout.decode()
    assert "registered cli-once/shop:web:80 (shop-web at web.shop.fake.invalid:80)" in out
    assert "registered cli-once/shop:web:8443" in out
    assert "DESIRED" in out, "a summary at the end"
    assert set(_node_services(address, node)) == {"shop:web:80", "shop:web:8443"}
    cleaned = cli("catalog", "cleanup", "--catalog-set", f"address={address}", "--node", node)
    assert cleaned.returncode == 0, cleaned.stderr
    lines = cleaned.stdout.decode().splitlines()
    assert sum(line.startswith("deregistered cli-once/") for line in lines) == 2
    assert lines[-2:] == ["REMOVED", "2"]
    assert _node_services(address, node) == {}


@pytest.mark.consul
def test_sync_runs_until_interrupted_then_prints_a_summary(cli, consul_agent: Any) -> None:
    address = consul_agent.http_address
    node = "cli-run"
    assert cli("apply", "shop.yaml").returncode == 0
    proc = cli(
        "catalog",
        "sync",
        "shop.yaml",
        "--catalog-set",
        f"address={address}",
        "--node",
        node,
        "--cleanup-on-exit",
        background=True,
    )
    try:
        assert wait_until(lambda: len(_node_services(address, node)) == 2, timeout=60)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = out.decode().splitlines()
    assert sum(line.startswith("registered ") for line in lines) == 2
    assert sum(line.startswith("deregistered ") for line in lines) == 2, "--cleanup-on-exit"
    assert _node_services(address, node) == {}


def test_an_unreachable_consul_is_a_coded_error_naming_the_address(cli) -> None:
    address = f"http://127.0.0.1:{free_ports(1)[0]}"
    result = cli(
        "catalog",
        "sync",
        "shop.yaml",
        "--catalog-set",
        f"address={address}",
        "--catalog-set",
        "timeout=2",
    )
    assert result.returncode == 3
    err = result.stderr.decode()
    assert "error [CATALOG_UNAVAILABLE]" in err
    assert address in err
    assert "'address' setting" in err


def test_bad_settings_are_coded_errors_naming_the_setting(cli) -> None:
    bad_backend = cli("catalog", "sync", "shop.yaml", "--catalog-set", "address=ftp://nowhere")
    assert bad_backend.returncode == 2
    assert b"error [INVALID_CONFIG]" in bad_backend.stderr
    assert b"address:" in bad_backend.stderr
    unknown = cli("catalog", "sync", "--catalog", "no-such-catalog")
    assert unknown.returncode == 4
    assert b"CATALOG_NOT_FOUND" in unknown.stderr
    source = cli("catalog", "sync", "--source", "nowhere")
    assert source.returncode == 2
    assert b"--source" in source.stderr


def test_list_shows_the_installed_catalogs(cli) -> None:
    listed = cli("--output", "json", "catalog", "list")
    assert listed.returncode == 0, listed.stderr
    names = {c["name"] for c in json.loads(listed.stdout)}
    assert {"consul", "memory"} <= names


def test_a_replica_syncs_while_it_holds_the_singleton(cli) -> None:
    assert cli("apply", "shop.yaml").returncode == 0
    quick = ("--lease-duration", "1.2", "--renew-deadline", "0.8", "--retry-period", "0.1")
    synced = cli("catalog", "sync", "shop.yaml", "--once", "--catalog", "memory",
                 "--replica", "host-a", *quick)  # fmt: skip
    assert synced.returncode == 0, synced.stderr
    assert "registered pando-runtime/shop:web:80" in synced.stdout.decode()
    assert b"replica host-a holds singleton catalog-sync" in synced.stderr


def test_a_replica_refuses_to_clean_up_and_bad_membership_settings(cli) -> None:
    on_exit = cli("catalog", "sync", "shop.yaml", "--catalog", "memory", "--replica", "a",
                  "--cleanup-on-exit")  # fmt: skip
    assert on_exit.returncode == 2
    assert b"error [INVALID_INPUT]" in on_exit.stderr
    assert b"--cleanup-on-exit" in on_exit.stderr
    cleanup = cli("catalog", "cleanup", "--catalog", "memory", "--replica", "a")
    assert cleanup.returncode == 2
    assert b"--replica" in cleanup.stderr
    bad = cli("catalog", "sync", "shop.yaml", "--catalog", "memory", "--replica", "Not_A_Name",
              "--renew-deadline", "20")  # fmt: skip
    assert bad.returncode == 2
    assert b"error [INVALID_CONFIG]" in bad.stderr
    assert b"replica:" in bad.stderr
    assert b"settings.renew_deadline:" in bad.stderr
