"""The Engine's progress answers: one JSON object a line (pulls, image loads)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["progress_message"]


def progress_message(line: str) -> dict[str, Any] | None:
    """The object one line of a progress answer holds; ``None`` for a blank or foreign line."""
    if not line.strip():
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None
