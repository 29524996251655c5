"""pytest plugin: the ``consul`` marker and the session-wide ``consul_agent`` fixture.

Load it with ``-p localconsul.pytest_plugin`` (with ``tests/support`` on ``pythonpath``).
A test that needs Consul while none can be built fails at setup, saying why; it is never
skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .agent import ConsulAgent

MARKER = "consul: the test needs a real Consul agent (fixture consul_agent)"


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``consul`` marker."""
    config.addinivalue_line("markers", MARKER)


@pytest.fixture(scope="session")
def consul_agent() -> Iterator[ConsulAgent]:
    """One dev-mode Consul agent for the session, left with ``consul leave``."""
    with ConsulAgent() as agent:
        yield agent
