"""pytest plugin of the conformance kit: registers its markers.

Load it explicitly (``pytest_plugins = ["pando_runtime.testing.pytest_plugin"]``
or ``-p pando_runtime.testing.pytest_plugin``); it is never loaded by itself,
so a host's own suite is untouched.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Register the kit's markers."""
    config.addinivalue_line(
        "markers", "pando_requires(*capabilities): run only where the adapter has them"
    )
    config.addinivalue_line("markers", "pando_since(version): conformance version of the test")
