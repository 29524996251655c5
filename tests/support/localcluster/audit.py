"""The API server's audit log: a policy that keeps it small, and a reader of its records.

The local control plane's kube-apiserver writes one JSON line per write request
(``create``, ``update``, ``patch``, ``delete``, ``deletecollection``) at the ``Metadata``
level: who sent it (user and User-Agent), what it touched and how it was answered, never a
body. Reads and watches, events, status reports and the control plane's own bookkeeping
(its bootstrap, node heartbeats, bindings, access reviews, its controllers' writes) are left out, so
what remains is the clients' writes: the apps' objects and the Leases. Tests read it with
:func:`read_audit_log` to see which process wrote what, and when.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["AUDIT_POLICY", "AuditRecord", "audit_args", "read_audit_log"]

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    verbs: ["get", "list", "watch"]
  - level: None
    namespaces: ["kube-system", "kube-node-lease", "kube-public"]
  - level: None
    users: ["system:apiserver", "system:kube-scheduler", "system:kube-controller-manager"]
  - level: None
    userGroups: ["system:serviceaccounts:kube-system", "system:nodes"]
  - level: None
    resources:
      - group: ""
        resources: ["events", "nodes", "nodes/status", "pods/status", "pods/binding"]
      - group: "events.k8s.io"
        resources: ["events"]
      - group: "authorization.k8s.io"
      - group: "authentication.k8s.io"
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
"""
"""Writes at ``Metadata`` level, everything else at ``None`` (see the module's docstring)."""


def audit_args(audit_dir: Path) -> list[str]:
    """The kube-apiserver flags that write the audit log into ``audit_dir`` (made here)."""
    audit_dir.mkdir(parents=True, exist_ok=True)
    policy = audit_dir / "policy.yaml"
    policy.write_text(AUDIT_POLICY)
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={audit_dir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",  # each record is on disk before its answer is sent
        "--audit-log-maxsize=0",  # never rotated: a test reads one file
    ]


@dataclass(frozen=True)
class AuditRecord:
    """One write the API server answered."""

    time: float
    """When the server received it (seconds since the epoch, as ``time.time()``)."""
    user: str
    user_agent: str
    verb: str
    namespace: str | None
    resource: str
    """The plural, with its subresource if any (``pods``, ``pods/binding``, ``leases``)."""
    name: str | None
    code: int
    """The answer's HTTP status (0 when the server recorded none)."""

    @property
    def replica(self) -> str | None:
        """The replica named in the User-Agent (``replica/<name>``), if any."""
        for part in self.user_agent.split():
            if part.startswith("replica/"):
                return part.removeprefix("replica/")
        return None


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _record(event: dict[str, Any]) -> AuditRecord:
    ref = event.get("objectRef") or {}
    resource = str(ref.get("resource") or "")
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    return AuditRecord(
        time=_epoch(event["requestReceivedTimestamp"]),
        user=str((event.get("user") or {}).get("username") or ""),
        user_agent=str(event.get("userAgent") or ""),
        verb=str(event.get("verb") or ""),
        namespace=ref.get("namespace"),
        resource=resource,
        name=ref.get("name"),
        code=int((event.get("responseStatus") or {}).get("code") or 0),
    )


def read_audit_log(path: Path) -> Iterator[AuditRecord]:
    """The records of the audit log at ``path``, in the order written.

    A last line still being written is left out; so is a record of another stage than
    ``ResponseComplete`` (a request that panicked, say).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("stage") == "ResponseComplete":
            yield _record(event)
