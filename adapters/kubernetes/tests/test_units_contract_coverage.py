"""The Kubernetes adapters cover the whole contract, as read from ``RuntimeAdapter`` itself.

Both re-list the contract method by method (the single-cluster one over its feature
components, the multi-cluster one over its members): a method the contract gains fails here
until each takes it up, instead of falling to the contract's default in production.
"""

from __future__ import annotations

import pytest
from pando_runtime_kubernetes import KubernetesAdapter, MultiClusterAdapter

from pando_runtime.plugin import CONTRACT_DEFAULTS, missing_contract_methods


@pytest.mark.parametrize("adapter", [KubernetesAdapter, MultiClusterAdapter])
def test_the_adapter_covers_every_contract_method(adapter: type) -> None:
    assert missing_contract_methods(adapter, exempt=CONTRACT_DEFAULTS) == []
