"""Whether the daemon answers, and what that means for every call.

A daemon that hangs (deadlocked, its machine stalled, a link that drops packets) keeps its
connections open and answers nothing: a call would wait out its read timeout. The cache's
probe (``GET /_ping`` within ``answer_timeout``) finds it out. From then on every call raises
``AdapterUnavailable`` at once, and the calls in flight are cut short with it, until the
daemon answers a probe again. A daemon that refuses connections (stopped, killed) is not
silent: its calls fail at once by themselves, saying it cannot be reached.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import anyio

from pando_runtime import AdapterUnavailable

from .._log import logger

__all__ = ["Answering", "not_answering"]

_LOG = logger("transport")


def not_answering(host: str, silent_for: float) -> AdapterUnavailable:
    """The daemon's connection is open but nothing answers (not: it cannot be reached)."""
    return AdapterUnavailable(
        f"the Docker daemon at {host} does not answer (nothing for {silent_for:.1f} s)",
        remedy="The engine is hung or the network to it drops packets: check the daemon on its "
        "machine and the link to it. Calls fail at once until it answers again.",
        details={"host": host, "cause": "not_answering", "silent_for": round(silent_for, 1)},
    )


class Answering:
    """The daemon's last answer, and the calls to cut short when it stops answering.

    ``timeout``: seconds a probe waits for its answer.
    """

    def __init__(self, host: str, timeout: float) -> None:
        self.host = host
        self.timeout = timeout
        self._answered_at = time.monotonic()
        self._silent = False
        self._in_flight: set[anyio.CancelScope] = set()

    @property
    def silent(self) -> bool:
        """A probe went unanswered, and nothing answered since."""
        return self._silent

    def silent_for(self) -> float:
        """Seconds since the daemon last answered anything."""
        return time.monotonic() - self._answered_at

    def answered(self) -> None:
        """The daemon answered (or refused at once: it does not hang)."""
        self._answered_at = time.monotonic()
        if self._silent:
            self._silent = False
            _LOG.info("the Docker daemon at %s answers again", self.host)

    def unanswered(self) -> None:
        """A probe got no answer in time: the daemon is silent; cut the calls in flight."""
        if not self._silent:
            _LOG.warning(
                "the Docker daemon at %s does not answer its probe within %.1f s: calls fail "
                "at once until it does",
                self.host,
                self.timeout,
            )
        self._silent = True
        for scope in self._in_flight:
            scope.cancel()

    def error(self) -> AdapterUnavailable:
        """What a call raises while the daemon is silent."""
        return not_answering(self.host, self.silent_for())

    def check(self) -> None:
        """Raise at once while the daemon is silent."""
        if self._silent:
            raise self.error()

    @contextlib.contextmanager
    def bounded(self) -> Iterator[None]:
        """A call cut short (and raising :meth:`error`) if the daemon goes silent meanwhile."""
        self.check()
        scope = anyio.CancelScope()
        self._in_flight.add(scope)
        try:
            with scope:
                yield
        finally:
            self._in_flight.discard(scope)
        if scope.cancelled_caught:
            raise self.error()
