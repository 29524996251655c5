"""What the API server's audit log says host replicas wrote, held against their journals.

The replicas and their journals are ``replicahosts``' (tests/support); :func:`overlaps` holds
their tenures against the audit log's writes, each of which names its replica in the
User-Agent.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping

from localcluster import AuditRecord
from pando_runtime_kubernetes._names import namespace_for
from replicahosts import SETTINGS, HostProcess, Journal, until

__all__ = ["SETTINGS", "HostProcess", "Journal", "bundle_writes", "overlaps", "until"]


def bundle_writes(records: Iterable[AuditRecord], apps: Iterable[str]) -> list[AuditRecord]:
    """The audit log's writes of the apps' objects (their namespace and what is in it)."""
    by_namespace = {namespace_for(app): app for app in apps}
    return [r for r in records if _bundle_of(r, by_namespace) is not None]


def _bundle_of(record: AuditRecord, by_namespace: Mapping[str, str]) -> str | None:
    if record.namespace is not None:
        return by_namespace.get(record.namespace)
    if record.resource == "namespaces" and record.name is not None:
        return by_namespace.get(record.name)
    return None


def overlaps(
    records: Iterable[AuditRecord], journals: Mapping[str, Journal], apps: Iterable[str]
) -> list[str]:
    """Every way the audit log's writes contradict "one writer at a time", described.

    Each write of an app's objects by a replica must fall in one of that replica's tenures of
    the app; and when the writer changes from one write to the next, the later writer's
    tenure must have begun after the earlier write.
    """
    apps = list(apps)
    by_namespace = {namespace_for(app): app for app in apps}
    problems: list[str] = []
    per_app: dict[str, list[AuditRecord]] = defaultdict(list)
    for record in records:
        app = _bundle_of(record, by_namespace)
        if app is None or record.replica is None:
            continue
        per_app[app].append(record)
        journal = journals.get(record.replica)
        if journal is None or journal.tenure_of(app, record.time) is None:
            problems.append(
                f"{app}: {record.replica} wrote ({record.verb} {record.resource}/{record.name}, "
                f"{record.code}) at {record.time:.3f}, outside its ownership"
            )
    for app, writes in per_app.items():
        writes.sort(key=lambda r: r.time)
        for before, after in itertools.pairwise(writes):
            if before.replica == after.replica:
                continue
            tenure = journals[after.replica].tenure_of(app, after.time) if after.replica else None
            if tenure is not None and tenure[0] <= before.time:
                problems.append(
                    f"{app}: {before.replica} wrote ({before.verb} {before.resource}) at "
                    f"{before.time:.3f}, after {after.replica} owned it (from {tenure[0]:.3f}; "
                    f"it wrote ({after.verb} {after.resource}) at {after.time:.3f})"
                )
    return problems
