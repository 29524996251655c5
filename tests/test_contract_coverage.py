"""Every class that re-lists the contract covers all of it, read from ``RuntimeAdapter`` itself.

A method the contract gains fails these tests until each wrapper and facade takes it up (or
says why it need not). The Kubernetes adapters are checked in their own suite
(``test_units_contract_coverage.py``), with the same helper. Another class joins with one line
in ``COVERING``, as the fake's replica did (``tests/test_fake_world.py`` holds it to the fake's
own implementations).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

import pando_runtime as pr
from pando_runtime.blocking import BlockingRuntime
from pando_runtime.plugin import (
    CONTRACT_DEFAULTS,
    DelegatingAdapter,
    contract_methods,
    missing_contract_methods,
)
from pando_runtime.testing import FakeAdapter, FakeReplica, make_tar

BLOCKING_EXEMPT = {
    "aclose": "leaving the with block closes the adapter",
    "exec": "an interactive session lives on the adapter's loop; blocking hosts use run()",
    "membership": "a membership's methods are async; entered through the portal",
    "read_scope": "a scope holds within one task; each blocking call is a task of its own",
}

INSTRUMENTED_UNMEASURED = {
    "configure": "settings only, no I/O",
    "info": "computed, no I/O",
    "upstream": "computed, no I/O",
    "read_scope": "the wrapped adapter's scope, entered by the host",
    "membership": "the wrapped adapter's membership, a long-lived context",
}

# (class, what it may leave uncovered and why, how it is checked): one line a class.
COVERING: dict[str, tuple[type, Mapping[str, str], dict[str, Any]]] = {
    "DelegatingAdapter": (DelegatingAdapter, {}, {}),
    "InstrumentedAdapter": (pr.InstrumentedAdapter, {}, {}),
    "BlockingRuntime": (BlockingRuntime, BLOCKING_EXEMPT, {"blocking": True}),
    "FakeReplica": (FakeReplica, CONTRACT_DEFAULTS, {}),
}


@pytest.mark.parametrize("label", list(COVERING))
def test_each_wrapper_and_facade_covers_every_contract_method(label: str) -> None:
    cls, exempt, how = COVERING[label]
    assert missing_contract_methods(cls, exempt=exempt, **how) == []


def test_the_instrumented_adapter_measures_every_operation_it_does_not_leave_alone() -> None:
    missing = missing_contract_methods(
        pr.InstrumentedAdapter, exempt=INSTRUMENTED_UNMEASURED, below=DelegatingAdapter
    )
    assert missing == []


def test_the_contract_is_read_from_the_class() -> None:
    methods = contract_methods()
    assert {"apply", "observe", "membership", "edge_volumes", "info", "configure"} <= methods
    assert not {"adapter_info", "kind", "description", "Config", "__aenter__"} & methods
    abstract = set(pr.RuntimeAdapter.__abstractmethods__)
    assert abstract <= methods, "every abstract method is part of it"


class _Lacking(DelegatingAdapter):
    """A wrapper that put ``edges`` back to the contract's default."""

    kind = "lacking"
    edges = pr.RuntimeAdapter.edges


def test_the_check_names_what_is_missing_inherited_async_or_wrongly_exempt() -> None:
    assert missing_contract_methods(_Lacking) == [
        "edges: inherited from RuntimeAdapter, not covered"
    ]
    assert missing_contract_methods(object) == [f"{n}: missing" for n in sorted(contract_methods())]
    assert missing_contract_methods(_Lacking, exempt={"edges": "why", "edgez": "typo"}) == [
        "edgez: exempt but not a contract method"
    ]
    blocking = missing_contract_methods(DelegatingAdapter, blocking=True)
    assert "apply: a coroutine function, not a blocking call" in blocking
    assert "upstream: a coroutine function, not a blocking call" not in blocking


def _recording_adapter() -> tuple[pr.RuntimeAdapter, list[tuple[str, dict[str, Any]]]]:
    """An adapter whose every contract method records its call (bound arguments) and its name."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def recorder(name: str, contract: Any) -> Any:
        signature = inspect.signature(contract)

        def record(self: Any, *args: Any, **kwargs: Any) -> str:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            calls.append((name, {k: v for k, v in bound.arguments.items() if k != "self"}))
            return name

        if inspect.iscoroutinefunction(contract):

            async def record_async(self: Any, *args: Any, **kwargs: Any) -> str:
                return record(self, *args, **kwargs)

            return record_async
        return record

    namespace: dict[str, Any] = {"kind": "recording"}
    for name in contract_methods():
        contract = inspect.getattr_static(pr.RuntimeAdapter, name)
        if isinstance(contract, property):
            namespace[name] = property(recorder(name, contract.fget))
        else:
            namespace[name] = recorder(name, contract)
    adapter = type("Recording", (pr.RuntimeAdapter,), namespace)()
    calls.clear()  # construction configures it
    return adapter, calls


_SAMPLES: dict[str, Any] = {"not_before": datetime(2026, 1, 1, tzinfo=UTC)}


class _Plain(DelegatingAdapter):
    kind = "plain"


@pytest.mark.anyio
async def test_a_delegating_adapter_hands_each_call_and_its_arguments_to_the_wrapped_one() -> None:
    inner, calls = _recording_adapter()
    wrapper = _Plain(inner)
    for name in sorted(contract_methods()):
        contract = inspect.getattr_static(pr.RuntimeAdapter, name)
        if isinstance(contract, property):
            assert getattr(wrapper, name) == name
            assert calls.pop() == (name, {})
            continue
        parameters = list(inspect.signature(contract).parameters.values())[1:]
        # Any object stands for an argument, but not_before: the contract checks it first.
        arguments = {p.name: _SAMPLES.get(p.name, object()) for p in parameters}
        positional = [arguments[p.name] for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        keywords = {p.name: arguments[p.name] for p in parameters if p.kind is p.KEYWORD_ONLY}
        result = getattr(wrapper, name)(*positional, **keywords)
        if inspect.iscoroutine(result):
            result = await result
        returns_nothing = inspect.signature(contract).return_annotation == "None"
        assert result == (None if returns_nothing else name), name
        assert calls.pop() == (name, arguments), name
        assert calls == []


@pytest.mark.anyio
async def test_a_delegating_adapter_enters_and_leaves_the_wrapped_adapters_block() -> None:
    fake = FakeAdapter()
    async with _Plain(fake) as wrapper:
        assert wrapper.adapter is fake
        assert wrapper.info == fake.info
        assert wrapper.config is fake.config
    assert fake.closed


def test_the_blocking_facade_reaches_images_and_edge_volumes() -> None:
    fake = FakeAdapter()
    with BlockingRuntime(fake) as runtime:
        reference = runtime.import_image(make_tar({"layer": b"1"}))
        assert reference.startswith("fake.local/imported@sha256:")
        assert runtime.has_image(reference)
        assert not runtime.has_image("fake.local/never:1")
        assert runtime.edge_volumes() == ()
        assert runtime.info == fake.info
    assert fake.closed
