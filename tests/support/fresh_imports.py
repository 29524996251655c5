"""What a fresh interpreter has imported after a snippet: the light-import tests' one reader.

Shared by the core's public-API tests and the Kubernetes and Docker adapters' light-import
tests: each runs its snippet in a new process, so nothing the test run imported counts.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

__all__ = ["modules_after"]


def modules_after(code: str) -> set[str]:
    """The names in ``sys.modules`` of a fresh interpreter once ``code`` (dedented) has run."""
    program = f"{textwrap.dedent(code)}\nimport sys; print(' '.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return set(result.stdout.split())
