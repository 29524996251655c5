"""Host replicas as real processes (``examples/replicas/replica_host.py``) and their journals.

A :class:`HostProcess` is one replica: started with the adapter's settings in a JSON file, it
journals (JSON lines) when it joined, gained and lost apps, and each apply's start and end.
:class:`Journal` reads that back as ownership *tenures*: from the moment a replica saw it owned
an app (journaled before it writes anything for it) until it saw it lost, left, or was killed,
stretched to the end of any apply it had started meanwhile. The runtimes' tests hold those
against what the runtime itself recorded (an audit log, an engine's events).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

import pando_runtime as pr

ROOT = Path(__file__).resolve().parents[2]
HOST = ROOT / "examples" / "replicas" / "replica_host.py"
SETTINGS = pr.MembershipSettings(lease_duration=2.0, renew_deadline=1.4, retry_period=0.25)
"""Short leases, so a failover takes seconds: client-go's relations, scaled down."""

KILL_GRACE = 0.5
"""Seconds after a SIGKILL in which the API server may still receive a request the process
wrote to its socket before it died (the audit log stamps a request when the server reads it)."""


@dataclass
class HostProcess:
    """One replica process; ``kill()`` is the crash (SIGKILL), ``stop()`` a clean leave."""

    name: str
    journal_path: Path
    process: subprocess.Popen[bytes]
    killed_at: float | None = None
    kill_grace: float = KILL_GRACE
    """Seconds after a SIGKILL its writes may still be recorded (the runtime's record's lag)."""

    @classmethod
    def start(  # noqa: PLR0917 - the host's command line
        cls,
        workdir: Path,
        config: Path,
        name: str,
        apps: int,
        prefix: str,
        more: Sequence[str] = (),
    ) -> HostProcess:
        """Start a replica; ``more``: further options of the host (``--adapter=fleet``, ...)."""
        journal = workdir / f"{name}.jsonl"
        argv = [
            sys.executable,
            str(HOST),
            f"--config={config}",
            f"--replica={name}",
            f"--apps={apps}",
            f"--prefix={prefix}",
            f"--lease-duration={SETTINGS.lease_duration}",
            f"--renew-deadline={SETTINGS.renew_deadline}",
            f"--retry-period={SETTINGS.retry_period}",
            f"--journal={journal}",
            *more,
        ]
        log = (workdir / f"{name}.log").open("ab")
        process = subprocess.Popen(argv, stdout=log, stderr=log)
        log.close()
        return cls(name, journal, process)

    def journal(self) -> Journal:
        return Journal.read(self.journal_path, killed_at=self.killed_at, grace=self.kill_grace)

    def kill(self) -> float:
        """SIGKILL: the replica renews nothing and releases nothing; the time it was sent."""
        self.killed_at = time.time()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        return self.killed_at

    def freeze(self) -> float:
        """SIGSTOP: the process stops where it is, its connections open; the time it was sent."""
        self.process.send_signal(signal.SIGSTOP)
        return time.time()

    def thaw(self) -> float:
        """SIGCONT after :meth:`freeze`; the time it was sent."""
        self.process.send_signal(signal.SIGCONT)
        return time.time()

    def stop(self) -> int:
        """SIGTERM, and wait: the replica leaves (its apps move at once); its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def ensure_gone(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@dataclass
class Journal:
    """A replica's journal, read back."""

    replica: str
    events: list[dict[str, Any]]
    killed_at: float | None = None
    grace: float = KILL_GRACE
    tenures: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @classmethod
    def read(
        cls, path: Path, *, killed_at: float | None = None, grace: float = KILL_GRACE
    ) -> Journal:
        events = []
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue  # a line cut short by SIGKILL
        journal = cls(path.stem, events, killed_at, grace)
        journal.tenures = journal._tenures()
        return journal

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def applied(self) -> set[str]:
        return {e["app"] for e in self.of("apply") if e.get("result") == "applied"}

    def in_flight(self) -> set[str]:
        """Apps whose apply started and has not ended (as journaled)."""
        open_: set[str] = set()
        for e in self.of("apply"):
            (open_.add if e["phase"] == "start" else open_.discard)(e["app"])
        return open_

    def owned(self) -> set[str]:
        """What the replica owned at its last journaled look."""
        owned: set[str] = set()
        for e in self.events:
            if e["event"] == "gained":
                owned |= set(e["apps"])
            elif e["event"] == "lost":
                owned -= set(e["apps"])
        return owned

    def gained_at(self, app: str, after: float = 0.0) -> float | None:
        """When the replica first saw it owned ``app`` after ``after``."""
        for e in self.of("gained"):
            if e["t"] > after and app in e["apps"]:
                return float(e["t"])
        return None

    def lost_at(self, app: str, after: float = 0.0) -> float | None:
        for e in self.of("lost"):
            if e["t"] > after and app in e["apps"]:
                return float(e["t"])
        return None

    def _end(self) -> float:
        """When the replica could have written last: a tenure or apply still open ends here."""
        if self.killed_at is not None:  # the server may still read what it sent before
            return self.killed_at + self.grace
        if self.events and self.events[-1]["event"] == "left":
            return float(self.events[-1]["t"])
        # Still running: what it owns now it still owns (a write may land after the journal's
        # last line, as the stamp of an app regained just before this was read).
        return math.inf

    def applies(self) -> list[tuple[str, float, float]]:
        """Each apply as (app, started, ended); one cut short ends when the journal does."""
        started: dict[str, float] = {}
        done = []
        for e in self.of("apply"):
            if e["phase"] == "start":
                started[e["app"]] = float(e["t"])
            elif e["app"] in started:
                done.append((e["app"], started.pop(e["app"]), float(e["t"])))
        return done + [(app, t, self._end()) for app, t in started.items()]

    def _tenures(self) -> dict[str, list[tuple[float, float]]]:
        """Per app: (saw it owned, could have written it last) for each time it owned it."""
        opened: dict[str, float] = {}
        tenures: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for e in self.events:
            apps = e.get("apps", ())
            if e["event"] == "gained":
                opened.update(dict.fromkeys(apps, float(e["t"])))
            elif e["event"] == "lost":
                for app in set(apps) & set(opened):
                    tenures[app].append((opened.pop(app), float(e["t"])))
        for app, start in opened.items():
            tenures[app].append((start, self._end()))
        # An apply begun while owning may go on writing after the loss was seen.
        for app, began, ended in self.applies():
            tenures[app] = [
                (start, max(end, ended) if start <= began <= end else end)
                for start, end in tenures[app]
            ]
        return dict(tenures)

    def tenure_of(self, app: str, at: float) -> tuple[float, float] | None:
        for start, end in self.tenures.get(app, ()):
            if start <= at <= end:
                return start, end
        return None


async def until(check: Callable[[], bool], *, within: float = 120.0) -> None:
    """Wait until ``check()`` holds; ``within`` seconds only catches a hang."""
    with anyio.fail_after(within):
        while not check():  # noqa: ASYNC110 - the journals are files other processes write
            await anyio.sleep(0.2)
