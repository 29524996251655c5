"""The one "roomiest" ordering: memory first, then CPU, for every adapter."""

from __future__ import annotations

import pando_runtime as pr


def test_the_roomiest_fit_has_the_most_memory_then_the_most_cpu() -> None:
    small = pr.Fit(cpu_millis=8000, memory_bytes=1 << 30)
    big = pr.Fit(cpu_millis=500, memory_bytes=4 << 30)
    big_more_cpu = pr.Fit(cpu_millis=1000, memory_bytes=4 << 30)
    assert pr.plugin.roomiest([small, big]) is big
    assert pr.plugin.roomiest([big, big_more_cpu, small]) is big_more_cpu
    assert pr.plugin.roomiest(iter([small])) is small  # any iterable
    assert pr.plugin.roomiest([]) is None
    assert big.roominess == (4 << 30, 500)
