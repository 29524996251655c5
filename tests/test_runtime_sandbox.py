"""Which runtime names sandbox an app: the one rule both adapters read (no runtime needed)."""

from __future__ import annotations

import pytest

from pando_runtime.plugin import runtime_sandbox


@pytest.mark.parametrize(
    ("name", "sandbox"),
    [
        ("runsc", "gvisor"),
        ("runsc-kvm", "gvisor"),
        ("RUNSC", "gvisor"),
        ("gvisor", "gvisor"),
        ("gvisor-ptrace", "gvisor"),
        ("io.containerd.runsc.v1", "gvisor"),
        ("kata", "kata"),
        ("kata-qemu", "kata"),
        ("kata-fc", "kata"),
        ("io.containerd.kata-qemu.v2", "kata"),
        ("runc", None),
        ("crun", None),
        ("io.containerd.runc.v2", None),
        ("runscx", None),
        ("my-runsc", None),
        ("", None),
        (None, None),
    ],
)
def test_gvisor_and_kata_runtimes_sandbox_and_no_other(name: str | None, sandbox: str) -> None:
    assert runtime_sandbox(name) == sandbox
