"""Whether a class that re-lists the contract (a wrapper, a facade) covers all of it.

The contract is read from :class:`RuntimeAdapter` itself, never from a list kept beside it,
so a method the contract gains is missing from every class that has not taken it up yet,
and a test built on :func:`missing_contract_methods` fails until it does (or until the
class says, in ``exempt``, why it need not).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from types import MappingProxyType

from ._abc import RuntimeAdapter

__all__ = ["CONTRACT_DEFAULTS", "contract_methods", "missing_contract_methods"]

CONTRACT_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "configure": "the contract structures the settings into the adapter's Config",
        "info": "the contract builds it from the class (kind, description, Config)",
        "run": "the contract runs it over the adapter's own exec",
        "read_scope": "the contract's scope serves the adapter's own reads",
    }
)
"""Contract methods whose :class:`RuntimeAdapter` implementation is whole, built on the
adapter's other methods: an adapter may keep them (pass this as ``exempt``); a wrapper may not,
since it would go round what it wraps."""


def contract_methods() -> frozenset[str]:
    """The public methods and properties a :class:`RuntimeAdapter` is used through.

    Every public name of the class (its bases included) that is a function or a property;
    class-level descriptions (``adapter_info``, ``kind``, ``description``, ``Config``)
    describe the class, not a runtime, and are left out.
    """
    names = set()
    for name in dir(RuntimeAdapter):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(RuntimeAdapter, name)
        if inspect.isfunction(value) or isinstance(value, property):
            names.add(name)
    return frozenset(names)


def missing_contract_methods(
    cls: type,
    *,
    exempt: Mapping[str, str] | None = None,
    below: type = RuntimeAdapter,
    blocking: bool = False,
) -> list[str]:
    """What ``cls`` does not cover of :func:`contract_methods`, one line each (empty: all).

    Args:
        cls: the class to check: a wrapper, a facade, an adapter.
        exempt: contract methods ``cls`` deliberately leaves to ``below``, each with the
            reason; naming a method the contract does not have is itself reported.
        below: a method counts only when defined under this class in ``cls``'s MRO: the
            default, :class:`RuntimeAdapter`, catches a method inherited from the contract's
            defaults (a gated one raises ``CapabilityUnsupported`` instead of reaching what
            the class wraps); :class:`DelegatingAdapter` catches one a wrapper forwards
            unchanged, where it means to change each (say, measure it).
        blocking: ``cls`` is a blocking facade: each method must be its own and plain (no
            coroutine function), the sync counterpart of the adapter's.
    """
    exempt = exempt or {}
    contract = contract_methods()
    problems = [
        f"{name}: exempt but not a contract method" for name in sorted(set(exempt) - contract)
    ]
    for name in sorted(contract - set(exempt)):
        own = inspect.getattr_static(cls, name, None)
        if own is None:
            problems.append(f"{name}: missing")
        elif own is inspect.getattr_static(below, name, None):
            problems.append(f"{name}: inherited from {below.__qualname__}, not covered")
        elif blocking and inspect.iscoroutinefunction(own):
            problems.append(f"{name}: a coroutine function, not a blocking call")
    return problems
