"""The adapter's loggers: ``pando_runtime.docker`` and its children, silent by default.

Children: ``.transport`` (every Engine API call), ``.cache`` (the event stream and relists),
``.bundles`` (apply, stop, destroy). Records carry their context as attributes (``bundle_id``,
``route``, ``status``). Never an environment value, file content, exec command, registry
credential, request or response body, nor a message the daemon wrote about a container's
configuration (it may quote a value).
"""

from __future__ import annotations

import logging

__all__ = ["LOGGER", "logger"]

LOGGER = logging.getLogger("pando_runtime.docker")
LOGGER.addHandler(logging.NullHandler())


def logger(component: str) -> logging.Logger:
    """The logger of one part of the adapter, ``pando_runtime.docker.<component>``."""
    return LOGGER.getChild(component)
