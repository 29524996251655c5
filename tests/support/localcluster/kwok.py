"""kwok's configuration: its options, the default stages, our exit-code stage, logs and exec.

Pods on fake nodes go Running through kwok's ``pod-ready`` stage. A pod annotated with
:data:`EXIT_CODE_ANNOTATION` then ends with that exit code (``Succeeded`` for 0, else
``Failed``), after :data:`EXIT_DELAY_ANNOTATION` milliseconds if given. Logs of every pod are
read from one CRI-format file, and ``exec`` runs the command locally in a work directory.
Each node serves kubelet-like resource metrics, which metrics-server scrapes: a pod uses what
its ``kwok.x-k8s.io/usage-cpu`` and ``kwok.x-k8s.io/usage-memory`` annotations say
(:data:`USAGE_CPU_ANNOTATION`, :data:`USAGE_MEMORY_ANNOTATION`), 1m and 1Mi by default.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

EXIT_CODE_ANNOTATION = "test.pando.dev/exit-code"
EXIT_DELAY_ANNOTATION = "test.pando.dev/exit-delay"
USAGE_CPU_ANNOTATION = "kwok.x-k8s.io/usage-cpu"
USAGE_MEMORY_ANNOTATION = "kwok.x-k8s.io/usage-memory"
POD_CIDR = "10.244.0.0/16"

_EXIT_TEMPLATE = """\
{{ $now := Now }}
{{ $code := index .metadata.annotations "EXIT_CODE_ANNOTATION" }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{ $code }}
      reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
conditions:
- type: Ready
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{ $now | Quote }}
phase: {{ if eq $code "0" }}Succeeded{{ else }}Failed{{ end }}
""".replace("EXIT_CODE_ANNOTATION", EXIT_CODE_ANNOTATION)


def exit_stage() -> dict[str, Any]:
    """The Stage that ends a Running pod with the exit code from its annotation."""
    code = f'.metadata.annotations["{EXIT_CODE_ANNOTATION}"]'
    delay = f'(.metadata.annotations["{EXIT_DELAY_ANNOTATION}"] // "0") + "ms"'
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-exit-on-annotation"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {"key": code, "operator": "Exists"},
                ]
            },
            # Beats kwok's pod-complete stage (weight 0) for annotated Job pods.
            "weight": 100,
            "delay": {"durationMilliseconds": 0, "durationFrom": {"jq": {"expression": delay}}},
            "next": {"statusTemplate": _EXIT_TEMPLATE},
        },
    }


def cri_log_line(text: str, stream: str = "stdout", when: datetime | None = None) -> str:
    """One line of a CRI-format log file (the format kwok's ClusterLogs requires)."""
    stamp = (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} {stream} F {text}\n"


def kwok_config(
    *,
    port: int,
    stage_files: Sequence[Path],
    metrics_files: Sequence[Path] = (),
    logs_file: Path,
    exec_dir: Path,
) -> str:
    """The multi-document YAML given to ``kwok --config``."""
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "manageAllNodes": False,
            "manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake",
            "nodeIP": "127.0.0.1",
            "nodePort": port,
            "serverAddress": f"127.0.0.1:{port}",
            "cidr": POD_CIDR,
            "nodeLeaseDurationSeconds": 40,
            # Required as soon as a KwokConfiguration document is given.
            "nodeLeaseParallelism": 4,
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enablePodsOnNodeSyncListPager": True,
            "enableDebuggingHandlers": True,
        },
    }
    logs = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "all-pods-logs"},
        "spec": {"selector": {}, "logs": [{"logsFile": str(logs_file), "follow": False}]},
    }
    execs = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterExec",
        "metadata": {"name": "all-pods-exec"},
        "spec": {
            "selector": {},
            "execs": [
                {"local": {"workDir": str(exec_dir), "envs": [{"name": "KWOK_EXEC", "value": "1"}]}}
            ],
        },
    }
    docs = [json.dumps(options, indent=2)]
    docs += [f.read_text().strip() for f in (*stage_files, *metrics_files)]
    docs += [json.dumps(d, indent=2) for d in (exit_stage(), logs, execs)]
    return "\n---\n".join(docs) + "\n"
