"""gVisor's ``runsc`` as an OCI runtime of the harness's engine (sandboxed apps).

``runsc`` comes from ``$PANDO_GVISOR_BIN`` (the test command builds it), else from
``tools/gvisor/build.sh`` (built once, cached outside the repository). Debian's package is not
used: its 2022 release refuses every container with a network on a current kernel.

The engine registers it as it is, with gVisor's own network stack (no ``runtimeArgs``): the
daemon's embedded DNS is then out of the sandbox's reach (``127.0.0.11`` stays on the sandbox's
own loopback; copying the namespace's NAT rules in with ``--reproduce-nat`` does not change
that), which the tests show.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from localcluster.binaries import repo_root

ENV_GVISOR_BIN = "PANDO_GVISOR_BIN"
RUNSC = "runsc"
"""The name the harness's engine knows gVisor's runtime by."""
RUNSC_ARGS: tuple[str, ...] = ()


def runsc_binary() -> Path:
    """``runsc``: from ``$PANDO_GVISOR_BIN``, else built (or found in its cache) by
    ``tools/gvisor/build.sh``; ``FileNotFoundError`` saying why when neither gives one."""
    named = os.environ.get(ENV_GVISOR_BIN)
    if named:
        found = Path(named).expanduser() / RUNSC
    else:
        script = repo_root() / "tools" / "gvisor" / "build.sh"
        proc = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, check=False, timeout=900
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise FileNotFoundError(f"{script} failed:\n{proc.stderr[-2000:]}")
        found = Path(lines[-1]) / RUNSC
    if not os.access(found, os.X_OK):
        raise FileNotFoundError(f"no executable runsc at {found} (${ENV_GVISOR_BIN})")
    return found
