"""What one scenario run found."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ScenarioResult:
    """Counts of one scenario run, for assertions and for the report."""

    name: str
    rounds: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    """Errors the adapter raised, by code (``UNCODED:<type>`` for anything else)."""
    retries: int = 0
    """Requests the adapter's transport retried (a 429 it waited out, for one)."""
    recovery: list[float] = field(default_factory=list)
    """Seconds from the end of each fault to the first good answer."""
    duplicates: int = 0
    """Workloads with more than one live pod at the end."""
    orphans: int = 0
    """Managed pods or namespaces that no applied plan accounts for at the end."""
    lost: int = 0
    """Transitions neither delivered nor covered by a ``MISSED``."""
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self, error: BaseException) -> None:
        """Count one error by its code."""
        code = getattr(error, "code", None)
        self.errors[str(code) if code else f"UNCODED:{type(error).__name__}"] += 1

    @property
    def uncoded(self) -> int:
        """Errors without a contract code (must be 0)."""
        return sum(n for code, n in self.errors.items() if code.startswith("UNCODED:"))

    def percentile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the recovery times, or ``None`` without any."""
        if not self.recovery:
            return None
        if len(self.recovery) == 1:
            return self.recovery[0]
        cuts = statistics.quantiles(sorted(self.recovery), n=100, method="inclusive")
        return cuts[max(0, min(98, round(q * 100) - 1))]

    def row(self) -> list[str]:
        """The report's row."""
        errors = ", ".join(f"{c} {n}" for c, n in sorted(self.errors.items())) or "-"
        p50, p99 = self.percentile(0.5), self.percentile(0.99)
        return [
            self.name,
            str(self.rounds),
            errors,
            str(self.retries),
            "-" if p50 is None else f"{p50:.2f}",
            "-" if p99 is None else f"{p99:.2f}",
            str(self.duplicates),
            str(self.orphans),
            str(self.lost),
        ]


HEADER = [
    "scenario",
    "rounds",
    "errors by code",
    "retries",
    "recovery p50 s",
    "recovery p99 s",
    "duplicates",
    "orphans",
    "lost transitions",
]
