"""The collector's queue: each ``(namespace, workload)`` whose pods changed, handled with retries.

The adapter's ``collect`` deletes the pods a newer instance has superseded. A key given up
after its retries is logged (WARNING, on ``pando_runtime.kubernetes.bundles``), naming the
pod when the error's details do; never an error's message (it may quote what a user wrote).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pando_runtime import PandoRuntimeError

from .._log import logger
from ._watch import why
from ._work_queue import WorkQueue

__all__ = ["Collector"]

_LOG = logger("bundles")


class Collector:
    """``collect`` run once at a time per key added to :attr:`queue`, retried with backoff."""

    def __init__(
        self,
        collect: Callable[[tuple[str, str]], Awaitable[None]],
        log_extra: Mapping[str, Any],
    ) -> None:
        self.queue: WorkQueue[tuple[str, str]] = WorkQueue()
        self._collect = collect
        self._log_extra = dict(log_extra)

    async def run(self) -> None:
        """Handle the queue's keys until cancelled."""
        await self.queue.run(self._collect, on_error=self._retried, on_drop=self._dropped)

    def _retried(self, key: tuple[str, str], error: Exception) -> None:
        ns, workload = key
        _LOG.debug(
            "collecting superseded pods of %s in namespace %s failed (%s): retrying",
            workload,
            ns,
            _collect_why(error),
            extra={**self._log_extra, "namespace": ns, "workload": workload},
        )

    def _dropped(self, key: tuple[str, str], error: Exception) -> None:
        """A key given up after its retries: what stays behind, and why (never a message)."""
        ns, workload = key
        details = error.details if isinstance(error, PandoRuntimeError) else {}
        pod = details.get("pod")
        what = f"superseded pod {pod} of {workload}" if pod else f"superseded pods of {workload}"
        _LOG.warning(
            "gave up removing %s in namespace %s after %d tries (%s): left until the "
            "workload's pods change again",
            what,
            ns,
            self.queue.max_retries + 1,
            _collect_why(error),
            extra={
                **self._log_extra,
                "namespace": ns,
                "workload": workload,
                "pod": pod,
                "code": getattr(error, "code", None),
                "status": details.get("status"),
            },
        )


def _collect_why(error: Exception) -> str:
    """A collector's failure as a log may say it: its code and status, never its message."""
    if isinstance(error, PandoRuntimeError):
        status = error.details.get("status")
        return f"{error.code}, status {status}" if status is not None else error.code
    return why(error)
