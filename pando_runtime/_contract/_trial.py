"""Trial runs: an image run once, alone, to see what it does."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .._util._frozen import frozen_mapping, frozen_tuple
from ._capabilities import IsolationClass
from ._plans import EgressPolicy, Port, RegistryAuth

__all__ = ["TrialRequest", "TrialResult"]


@attrs.frozen(kw_only=True)
class TrialRequest:
    """Run ``image`` once in isolation for at most ``timeout_seconds``.

    ``declared_paths`` are writable places the image says it needs; the trial
    reports writes elsewhere where the runtime can observe writes. ``egress`` holds
    the trial to the outbound rules the app would run with (``None``: unrestricted,
    as a bundle without ``network.egress``).
    """

    trial_id: str
    image: str
    command: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    entrypoint: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    working_dir: str | None = None
    env: Mapping[str, str] = attrs.field(
        factory=dict, converter=frozen_mapping, repr=lambda e: f"<{len(e)} variables>"
    )
    pull_auth: RegistryAuth | None = None
    declared_paths: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    timeout_seconds: float = 60.0
    isolation_floor: IsolationClass = IsolationClass.CONTAINER
    egress: EgressPolicy | None = None


@attrs.frozen(kw_only=True)
class TrialResult:
    """What the trial saw.

    ``exit_code`` is ``None`` when the image was still running at the end (a
    server that stays up passes). ``observed_ports`` are ports it listened on
    reachable from outside; ``loopback_ports`` only on loopback. ``log`` holds
    the first bytes of its output (64 KiB at most).
    """

    started: bool
    exit_code: int | None = None
    observed_ports: tuple[Port, ...] = attrs.field(default=(), converter=frozen_tuple)
    loopback_ports: tuple[Port, ...] = attrs.field(default=(), converter=frozen_tuple)
    observed_writes: tuple[str, ...] = attrs.field(default=(), converter=frozen_tuple)
    log: bytes = attrs.field(default=b"", repr=lambda b: f"<{len(b)} bytes>")
