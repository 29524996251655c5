"""The adapter's loggers: ``pando_runtime.kubernetes`` and its children, silent by default.

The adapter's logger is a child of the core's ``pando_runtime``, so a host that sets up
``pando_runtime`` hears the adapter too; it carries its own ``NullHandler`` (the adapter may
log before anything of the core has). Children: ``.transport`` (every API call),
``.watch`` (the cache's watches), ``.session`` (connecting, retried writes), ``.bundles``,
``.canary``, ``.health`` (the health check's egress details), ``.usage``, ``.tokens``,
``.multi``, ``.images`` (the image registry's calls and imports).

Records carry their context as attributes: ``cluster`` (the cluster's name, when known),
``bundle_id``, ``namespace``, ``verb``, ``resource``, ``status``, ``duration_s``, ``code``.
Never an environment value, token, password, file content, exec command, request or
response body, nor a message the API server wrote (it may quote a value).
"""

from __future__ import annotations

import logging

__all__ = ["LOGGER", "logger"]

LOGGER = logging.getLogger("pando_runtime.kubernetes")
LOGGER.addHandler(logging.NullHandler())


def logger(component: str) -> logging.Logger:
    """The logger of one part of the adapter, ``pando_runtime.kubernetes.<component>``."""
    return LOGGER.getChild(component)
