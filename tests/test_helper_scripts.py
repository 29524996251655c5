"""The helper scripts adapters share: the restore run by a real shell and tar, the port reader."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import pando_runtime as pr
from pando_runtime.plugin import RESTORE_SCRIPT, listening_ports, split_socket_tables
from pando_runtime.testing import make_tar


def restore(directory: Path, archive: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["sh", "-c", RESTORE_SCRIPT, "sh", str(directory)],
        input=archive,
        capture_output=True,
        check=False,
    )


def files_in(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def test_a_restore_replaces_every_file_hidden_ones_included(tmp_path: Path) -> None:
    (tmp_path / ".hidden").write_bytes(b"old")
    (tmp_path / "old" / "deep").mkdir(parents=True)
    (tmp_path / "old" / "deep" / "f").write_bytes(b"old")
    done = restore(tmp_path, make_tar({"new/a.txt": b"1", ".dot": b"2"}))
    assert done.returncode == 0, done.stderr
    assert files_in(tmp_path) == {"new/a.txt": b"1", ".dot": b"2"}


def test_a_bad_archive_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "kept").write_bytes(b"still here")
    done = restore(tmp_path, b"no tar at all" * 100)
    assert done.returncode == 65  # the script's code for a bad archive
    assert b"not a valid tar archive" in done.stderr
    assert files_in(tmp_path) == {"kept": b"still here"}


@pytest.mark.parametrize(
    ("line", "routable", "loopback"),
    [
        # 0.0.0.0:8080 listening
        ("0: 00000000:1F90 00000000:0000 0A", {pr.Port(8080)}, set()),
        # 127.0.0.1:9090 listening
        ("1: 0100007F:2382 00000000:0000 0A", set(), {pr.Port(9090)}),
        # an established connection is no port listened on
        ("2: 0100007F:2382 0100007F:C350 01", set(), set()),
    ],
)
def test_listening_ports_reads_the_kernels_tables(
    line: str, routable: set[pr.Port], loopback: set[pr.Port]
) -> None:
    output = f"==> /proc/net/tcp\n  sl local rem st\n{line}\n==> /proc/net/udp\n"
    assert listening_ports(split_socket_tables(output)) == (routable, loopback)
