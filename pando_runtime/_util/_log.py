"""The library's loggers: ``pando_runtime`` and its children, silent until the host configures.

A library configures no handlers of its own: ``pando_runtime`` carries a
``NullHandler``, so nothing is printed unless the host sets up logging. Each
record carries its context as attributes (``extra``), for structlog or JSON
handlers: ``bundle_id``, ``workload``, ``operation``, ``adapter``, ``code`` (an
error code), ``duration_s``; adapters add their own (``cluster``, ``verb``,
``resource``, ``status``). Levels: INFO for what changes state, WARNING for a
degraded runtime (throttled, retrying, unreachable), DEBUG for each call.

What is never logged: environment values, tokens, registry passwords, the
content of carried files or volumes, commands run by exec, and error messages
a runtime's server wrote (they may quote a value); ids, names, counts, codes
and durations are.
"""

from __future__ import annotations

import logging

__all__ = ["LOGGER", "logger"]

LOGGER = logging.getLogger("pando_runtime")
LOGGER.addHandler(logging.NullHandler())


def logger(component: str) -> logging.Logger:
    """The logger of one part of the library, ``pando_runtime.<component>``."""
    return LOGGER.getChild(component)
