"""The command line's setup: the config file, the adapter it names, the fake's state file."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .._adapter._abc import RuntimeAdapter
from .._adapter._registry import load_adapter
from .._contract._errors import InvalidInput
from ._console import Console

__all__ = ["STATE_FILE", "adapter_name", "default_state_file", "open_adapter", "read_config"]


def read_config(args: argparse.Namespace) -> dict[str, Any]:
    """The adapter's settings: the config file, then each ``--set key=value`` over it.

    The file is ``--config``, or else ``PANDO_RUNTIME_CONFIG``; none when neither is given.
    """
    import yaml  # noqa: PLC0415 - only the CLI reads config files

    config: dict[str, Any] = {}
    path = args.config or os.environ.get("PANDO_RUNTIME_CONFIG")
    if path:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise InvalidInput(f"config file {path} must hold a mapping of settings")
        config.update(loaded)
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidInput(f"--set takes key=value, got {item!r}")
        config[key] = yaml.safe_load(value)
    return config


STATE_FILE = "state_file"
"""The fake adapter's setting that names its state file."""


def default_state_file() -> Path:
    """Where the fake adapter keeps its world for the command line, per user (XDG)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    # The XDG spec ignores a relative path.
    root = Path(base) if Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "pando-runtime" / "fake.json"


def adapter_name(args: argparse.Namespace) -> str:
    """The adapter asked for: ``--adapter``, ``PANDO_RUNTIME_ADAPTER``, or the fake."""
    return str(args.adapter or os.environ.get("PANDO_RUNTIME_ADAPTER") or "fake")


def open_adapter(args: argparse.Namespace, console: Console) -> RuntimeAdapter:
    """The configured adapter, not yet entered; the fake keeps its world in the state file."""
    name = adapter_name(args)
    config = read_config(args)
    if name == "fake" and STATE_FILE not in config:
        state = default_state_file()
        if not state.exists():
            console.note(
                f"the fake adapter keeps its world in {state} between commands "
                "(pando-runtime reset clears it)"
            )
        config[STATE_FILE] = str(state)
    return load_adapter(name, config)
