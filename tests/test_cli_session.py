"""The command line as a new user meets it: the real console script in a temporary HOME.

On the default fake adapter, separate commands share one world through a per-user state file.
"""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

import pando_runtime as pr
from pando_runtime._cli._commands import Console, _wait_running
from pando_runtime._cli._progress import AppProgress, ReadyDisplay
from pando_runtime._cli._units import cpu, size
from pando_runtime.testing import FakeAdapter, make_tar, read_tar

SCRIPT = Path(sys.executable).parent / "pando-runtime"
SHOP = Path(__file__).resolve().parents[1] / "examples" / "bundles" / "shop.yaml"
CART = """\
bundle_id: cart
workloads:
  - {name: api, image: x/cart:1, resources: {cpu_millis: 1500, memory_bytes: 1610612736}}
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PANDO_RUNTIME_", "XDG_", "_ARGCOMPLETE"))
    }
    return {**env, "HOME": str(home), **extra}


def run(
    home: Path, *args: str, stderr: int | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=stderr is None,
        stdout=subprocess.PIPE if stderr is not None else None,
        stderr=stderr,
        env=_env(home, **env),
        input="",  # never the terminal
        text=True,
        timeout=60,
        check=False,
        cwd=home,
    )


def test_separate_commands_on_the_default_fake_share_one_world(home: Path) -> None:
    state = home / ".local" / "state" / "pando-runtime" / "fake.json"
    applied = run(home, "apply", str(SHOP))
    assert applied.returncode == 0, applied.stderr
    assert f"keeps its world in {state}" in applied.stderr, "first use says where"
    assert "pando-runtime reset" in applied.stderr
    assert state.is_file()
    observed = run(home, "--output", "json", "observe", "shop")
    assert observed.returncode == 0, observed.stderr
    assert "note:" not in observed.stderr, "said once"
    assert [w["running"] for w in json.loads(observed.stdout)["workloads"]] == [True, True]
    assert run(home, "logs", "shop", "web").returncode == 0, "the workload has an instance"
    executed = run(home, "exec", "shop", "web", "--", "nginx", "-t")
    assert executed.returncode == 127, "the command reached the running workload"
    assert "command not found" in executed.stderr
    assert "runs no real commands" in executed.stderr, "a person trying the fake learns why"
    (home / "site.tar").write_bytes(make_tar({"index.html": b"<h1>shop</h1>"}))
    assert run(home, "volume", "restore", "shop", "shop_data", "site.tar").returncode == 0
    assert run(home, "volume", "snapshot", "shop", "shop_data", "back.tar").returncode == 0
    assert read_tar((home / "back.tar").read_bytes()) == {"index.html": b"<h1>shop</h1>"}
    destroyed = run(home, "destroy", "shop")
    assert destroyed.returncode == 0, destroyed.stderr
    assert "its volumes stay: shop_data" in destroyed.stderr, "and how to remove them"
    gone = run(home, "observe", "shop")
    assert gone.returncode == 4
    assert "does not exist" in gone.stdout
    assert "volume shop_data" in gone.stdout, "volumes outlive a destroy unless --volumes"


def test_reset_forgets_the_world_and_says_so(home: Path) -> None:
    assert run(home, "apply", str(SHOP)).returncode == 0
    reset = run(home, "--output", "json", "reset")
    assert reset.returncode == 0, reset.stderr
    assert json.loads(reset.stdout)["removed"] is True
    observed = run(home, "observe", "shop")
    assert observed.returncode == 4
    assert "keeps its world in" in observed.stderr, "a fresh world is news again"
    assert run(home, "reset").stdout.split()[-1] == "yes", "the empty world it made"
    assert run(home, "reset").stdout.split()[-1] == "no", "nothing left to clear"
    other = run(home, "--adapter", "kubernetes", "reset")
    assert other.returncode == 2
    assert "fake adapter" in other.stderr


def test_the_state_file_follows_xdg_and_the_setting_overrides(home: Path, tmp_path: Path) -> None:
    xdg = tmp_path / "xdg-state"
    assert run(home, "apply", str(SHOP), XDG_STATE_HOME=str(xdg)).returncode == 0
    assert (xdg / "pando-runtime" / "fake.json").is_file()
    assert not (home / ".local").exists()
    elsewhere = tmp_path / "elsewhere.json"
    assert run(home, "--set", f"state_file={elsewhere}", "apply", str(SHOP)).returncode == 0
    assert elsewhere.is_file()
    in_memory = run(home, "--set", "state_file=", "apply", str(SHOP))
    assert in_memory.returncode == 0
    assert "note:" not in in_memory.stderr
    assert run(home, "--set", "state_file=", "observe", "shop").returncode == 4, "kept nothing"
    assert not (home / ".local").exists()


def test_a_reading_command_never_puts_back_an_old_world(home: Path) -> None:
    assert run(home, "apply", str(SHOP)).returncode == 0
    state = home / ".local" / "state" / "pando-runtime" / "fake.json"
    written = state.stat().st_mtime_ns
    assert run(home, "observe", "shop").returncode == 0
    assert run(home, "logs", "shop", "db").returncode == 0
    assert state.stat().st_mtime_ns == written


def test_tables_speak_human_units_and_json_keeps_integers(home: Path, tmp_path: Path) -> None:
    (home / "cart.yaml").write_text(CART)
    assert run(home, "apply", str(SHOP), "cart.yaml").returncode == 0
    capacity = run(home, "capacity").stdout.splitlines()
    assert capacity[0].split() == ["CPU", "MEMORY", "RUNNING", "LARGEST", "FIT"]
    assert capacity[1].split()[:4] == ["8", "cores", "16", "GiB"]
    raw = json.loads(run(home, "--output", "json", "capacity").stdout)
    assert (raw["total_cpu_millis"], raw["total_memory_bytes"]) == (8000, 16 * 1024**3)
    usage = run(home, "usage", "cart").stdout
    assert "1.5 cores" in usage
    assert "1.5 GiB" in usage
    assert "250m" in run(home, "usage", "shop").stdout
    assert "128 MiB" in run(home, "usage", "shop").stdout
    raw_usage = json.loads(run(home, "--output", "json", "usage", "cart").stdout)
    assert raw_usage["workloads"][0]["memory_limit_bytes"] == 1610612736


def test_apply_waits_for_every_app_with_plain_lines_off_a_terminal(home: Path) -> None:
    (home / "cart.yaml").write_text(CART)
    applied = run(home, "apply", str(SHOP), "cart.yaml")
    assert applied.returncode == 0, applied.stderr
    lines = applied.stderr.splitlines()
    assert "waiting for shop: 2/2 running" in lines
    assert "waiting for cart: 1/1 running" in lines
    assert not any("\r" in line or "\x1b" in line for line in lines), "no terminal codes"
    assert applied.stdout.count("WORKLOAD") == 2, "one table per app"
    as_json = run(home, "--output", "json", "apply", str(SHOP))
    assert json.loads(as_json.stdout)["bundle_id"] == "shop", "one file: the same JSON as before"
    assert "waiting" not in as_json.stderr


def test_apply_on_a_terminal_redraws_one_status_line(home: Path) -> None:
    leader, follower = pty.openpty()
    try:
        applied = run(home, "apply", str(SHOP), stderr=follower)
    finally:
        os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: everything was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert applied.returncode == 0
    assert b"\r\x1b[2K" in shown, "the status line is redrawn in place"
    assert b"waiting for shop: 2/2 running" in shown, "and left as a plain line at the end"


def test_ready_display_repeats_nothing_off_a_terminal() -> None:
    out = io.StringIO()
    display = ReadyDisplay(out, live=False)
    display.update([AppProgress("shop", 0, 2, ("db", "web"))], 0.0)
    display.update([AppProgress("shop", 0, 2, ("db", "web"))], 1.0)
    display.update([AppProgress("shop", 1, 2, ("web",))], 2.0)
    display.finish()
    assert out.getvalue() == "waiting for shop: 0/2 running\nwaiting for shop: 1/2 running\n"
    live = io.StringIO()
    display = ReadyDisplay(live, live=True)
    display.update([AppProgress("shop", 1, 2, ("web",))], 3.0)
    assert "shop 1/2 (waiting: web)" in live.getvalue()
    display.finish()
    assert live.getvalue().endswith("\r\x1b[2Kwaiting for shop: 1/2 running\n")


@pytest.mark.parametrize(
    ("millis", "shown"),
    [
        (0, "0m"),
        (250, "250m"),
        (999, "999m"),
        (1000, "1 core"),
        (1500, "1.5 cores"),
        (1234, "1.234 cores"),
        (8000, "8 cores"),
    ],
)
def test_cpu_units(millis: int, shown: str) -> None:
    assert cpu(millis) == shown


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (134217728, "128 MiB"),
        (17179869184, "16 GiB"),
        (5 * 1024**4, "5 TiB"),
    ],
)
def test_size_units(count: int, shown: str) -> None:
    assert size(count) == shown


def test_shell_completion_when_argcomplete_is_installed(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("argcomplete")
    answer = tmp_path / "completions"
    line = "pando-runtime re"
    completed = run(
        home,
        _ARGCOMPLETE="1",
        COMP_LINE=line,
        COMP_POINT=str(len(line)),
        _ARGCOMPLETE_STDOUT_FILENAME=str(answer),
    )
    assert completed.returncode == 0, completed.stderr
    assert answer.read_text().split() == ["reset"]


@pytest.mark.anyio
async def test_waiting_past_the_timeout_names_the_late_apps() -> None:
    plan = pr.load_bundle_file(SHOP)
    out, err = io.StringIO(), io.StringIO()
    async with FakeAdapter() as fake:
        await fake.apply(plan)
        await fake.stop(pr.BundleRef("shop"))  # stopped workloads never come back by themselves
        (observed,) = await _wait_running(fake, [plan], Console(False, out, err), 0.05)
    assert not observed.all_running
    assert err.getvalue().splitlines()[-1] == "not running after 0.05s: shop"
