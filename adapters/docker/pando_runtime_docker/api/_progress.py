"""The Engine's progress answers: one JSON object a line (pulls, image loads)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["progress_error", "progress_message"]


def progress_message(line: str) -> dict[str, Any] | None:
    """The object one line of a progress answer holds; ``None`` for a blank or foreign line."""
    if not line.strip():
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def progress_error(message: dict[str, Any]) -> str | None:
    """The failure one progress object reports, ``None`` when it reports none.

    ``errorDetail.message`` first: the top-level ``error`` is deprecated since API 1.48 and
    may go; an engine that sends only the old field is read through it.
    """
    detail = message.get("errorDetail")
    reason = detail.get("message") if isinstance(detail, dict) else None
    reason = reason or message.get("error")
    if reason:
        return str(reason)
    return "the daemon reported an error it did not describe" if detail is not None else None
