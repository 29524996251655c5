"""The test harness's Consul agent when another process takes one of its ports first."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from localcluster.process import Component
from localconsul.agent import ConsulAgent

pytestmark = pytest.mark.consul


class _FirstPortTaken(ConsulAgent):
    """An agent whose first choice of HTTP port is already bound by another socket."""

    def __init__(self, taken: int, workdir: Path) -> None:
        self.taken = taken
        self.choices = 0
        super().__init__(workdir=workdir)

    def _on_free_ports(self) -> Component:
        component = super()._on_free_ports()
        self.choices += 1
        if self.choices == 1:  # as if another process bound it between choice and start
            self.ports["http"] = self.taken
            component.argv = [
                f"-http-port={self.taken}" if arg.startswith("-http-port=") else arg
                for arg in component.argv
            ]
        return component


def test_a_port_taken_before_the_start_is_left_for_others(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        agent = _FirstPortTaken(taken, tmp_path)
        with agent:
            assert agent.choices == 2, "started again on ports chosen anew"
            assert agent.ports["http"] != taken
            assert agent._leader()
