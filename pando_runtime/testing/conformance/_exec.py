"""Conformance: running commands in workloads."""

from __future__ import annotations

import anyio

from ..._contract._capabilities import Capability
from ..._contract._exec import ExecRequest
from ..._contract._streams import read_all
from ._base import ConformanceBase, Kit, since

__all__ = ["ExecConformance"]


class ExecConformance(ConformanceBase):
    """``exec`` and ``run``: exit codes, stdin, stdout and stderr apart."""

    gate = (Capability.EXEC,)

    @since("1.0")
    async def test_run_reports_the_exit_code(self, kit: Kit) -> None:
        plan = kit.plan()
        await kit.applied_and_running(plan)
        with anyio.fail_after(kit.harness.timeout):
            failed = await kit.adapter.run(
                kit.ref(plan), ExecRequest(command=kit.harness.exit_command(3))
            )
            passed = await kit.adapter.run(
                kit.ref(plan), ExecRequest(command=kit.harness.exit_command(0))
            )
        assert failed.exit_code == 3
        assert passed.exit_code == 0
        assert passed.ok

    @since("1.0")
    async def test_run_feeds_stdin_and_separates_outputs(self, kit: Kit) -> None:
        plan = kit.plan()
        await kit.applied_and_running(plan)
        with anyio.fail_after(kit.harness.timeout):
            echoed = await kit.adapter.run(
                kit.ref(plan),
                ExecRequest(command=kit.harness.echo_stdin_command()),
                stdin=b"ping from the host",
            )
            printed = await kit.adapter.run(
                kit.ref(plan),
                ExecRequest(command=kit.harness.print_command("to-out", "to-err")),
            )
        assert echoed.stdout == b"ping from the host"
        assert echoed.exit_code == 0
        assert printed.stdout == b"to-out"
        assert printed.stderr == b"to-err"

    @since("1.0")
    async def test_session_streams_stdin_until_closed(self, kit: Kit) -> None:
        plan = kit.plan()
        await kit.applied_and_running(plan)
        request = ExecRequest(command=kit.harness.echo_stdin_command(), stdin=True)
        with anyio.fail_after(kit.harness.timeout):
            async with kit.adapter.exec(kit.ref(plan), request) as session:
                assert session.stdin is not None
                await session.stdin.send(b"one ")
                await session.stdin.send(b"two")
                await session.stdin.aclose()
                out = await read_all(session.stdout)
                code = await session.wait()
        assert out == b"one two"
        assert code == 0
