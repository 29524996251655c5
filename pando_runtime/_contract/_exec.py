"""Running commands inside a workload: requests, sessions and results."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from types import TracebackType
from typing import Self

import attrs
from anyio.abc import ByteReceiveStream, ByteSendStream

from .._util._frozen import frozen_mapping, frozen_tuple

__all__ = ["ExecRequest", "ExecResult", "ExecSession"]


@attrs.frozen(kw_only=True)
class ExecRequest:
    """A command to run in a workload.

    ``env`` is passed to the command only, never written to the workload.
    ``stdin`` opens the session's stdin stream; with ``tty`` stdout and stderr
    are one stream (``stderr`` stays empty) and ``resize`` works.
    """

    command: tuple[str, ...] = attrs.field(converter=frozen_tuple)
    tty: bool = False
    stdin: bool = False
    env: Mapping[str, str] = attrs.field(
        factory=dict, converter=frozen_mapping, repr=lambda e: f"<{len(e)} variables>"
    )


@attrs.frozen(kw_only=True)
class ExecResult:
    """A command run to its end. ``exit_code`` is ``None`` when the runtime cannot tell."""

    exit_code: int | None
    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def ok(self) -> bool:
        """The command exited with 0."""
        return self.exit_code == 0


class ExecSession(abc.ABC):
    """A command running in a workload, with its standard streams.

    Use it as ``async with``: leaving the block closes the streams and ends the
    session. ``stdin`` is ``None`` unless the request asked for it; closing it
    sends end-of-file to the command.
    """

    stdin: ByteSendStream | None
    stdout: ByteReceiveStream
    stderr: ByteReceiveStream

    @abc.abstractmethod
    async def resize(self, rows: int, columns: int) -> None:
        """Tell a TTY session its terminal's new size."""

    @abc.abstractmethod
    async def wait(self) -> int | None:
        """Wait for the command to end; its exit code, or ``None`` when unknown (never a guess)."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """End the session and release everything it holds."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
