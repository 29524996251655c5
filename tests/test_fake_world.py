"""One world for the fake: its replicas are fakes over the same runtime, method for method.

The methods are read from :class:`RuntimeAdapter` itself (``contract_methods``), so a
method added to the contract is checked here without anyone listing it.
"""

from __future__ import annotations

import contextlib
import inspect
import typing
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import pando_runtime as pr
from pando_runtime.plugin import contract_methods
from pando_runtime.testing import FakeAdapter, FakeReplica, ImageBehaviour, make_tar

pytestmark = pytest.mark.anyio

BUNDLE = pr.BundlePlan(
    bundle_id="shop",
    workloads=(pr.WorkloadPlan(name="web", image="x/web:1"),),
    volumes=(pr.VolumePlan(volume_id="shop-data", name="data"),),
)
EDGE = pr.EdgePlan(name="edge", image="traefik:3")


METHODS = sorted(contract_methods())


def _implementation(cls: type, name: str) -> object:
    """The function ``cls`` answers ``name`` with (a classmethod's function too)."""
    member = inspect.getattr_static(cls, name)
    return getattr(member, "__func__", member)


@pytest.mark.parametrize("name", METHODS)
def test_a_replica_answers_each_contract_method_as_the_fake_does(name: str) -> None:
    assert not inspect.isabstract(FakeReplica)
    assert _implementation(FakeReplica, name) is _implementation(FakeAdapter, name), (
        f"FakeReplica.{name} is not the fake's own: a replica would answer it otherwise"
    )


def _samples(fake: FakeAdapter, volume: pr.VolumeHandle) -> dict[object, Callable[[], Any]]:
    """A valid argument for each type (or parameter name) the contract's methods take."""
    return {
        pr.BundlePlan: lambda: BUNDLE,
        pr.BundleRef: lambda: pr.BundleRef("shop"),
        pr.WorkloadRef: lambda: pr.WorkloadRef("shop", "web"),
        pr.ExecRequest: lambda: pr.ExecRequest(command=("true",)),
        pr.VolumeRequest: lambda: pr.VolumeRequest(
            volume_id="extra", bundle_id="shop", name="extra"
        ),
        pr.VolumeHandle: lambda: volume,
        pr.TrialRequest: lambda: pr.TrialRequest(trial_id="t1", image="x/web:1"),
        pr.EdgePlan: lambda: EDGE,
        int: lambda: 8080,
        "source": lambda: pr.BytesReceiveStream(make_tar({"a": b"1"})),
        "config": lambda: fake.config,
        "bundle_id": lambda: "shop",
        "reference": lambda: "x/web:1",
        "name": lambda: "edge",
        "replica": lambda: "replica-a",
    }


def _is_property(name: str) -> bool:
    return isinstance(inspect.getattr_static(pr.RuntimeAdapter, name), property)


def _arguments(fake: FakeAdapter, volume: pr.VolumeHandle, name: str) -> list[Any]:
    if _is_property(name):
        return []
    method = getattr(pr.RuntimeAdapter, name)
    hints = typing.get_type_hints(method)
    samples = _samples(fake, volume)
    arguments = []
    for parameter in inspect.signature(method).parameters.values():
        if parameter.name in {"self", "cls"} or parameter.default is not parameter.empty:
            continue
        make = samples.get(hints.get(parameter.name)) or samples.get(parameter.name)
        if make is None:
            pytest.fail(f"no sample argument for {name}({parameter.name}): add one above")
        arguments.append(make())
    return arguments


async def _call(adapter: pr.RuntimeAdapter, name: str, arguments: list[Any]) -> None:
    if _is_property(name):
        getattr(adapter, name)
        return
    result = getattr(adapter, name)(*arguments)
    if inspect.isawaitable(result):
        await result
    elif hasattr(result, "__aenter__"):
        async with result:
            pass


async def _world() -> tuple[FakeAdapter, FakeReplica, pr.VolumeHandle]:
    fake = FakeAdapter()
    await fake.apply(BUNDLE)
    await fake.apply_edge(EDGE)
    observed = await fake.observe(pr.BundleRef("shop"))
    handle = observed.volumes[0].handle
    assert handle is not None
    return fake, fake.replica(), handle


@pytest.mark.parametrize("name", METHODS)
async def test_a_fault_scripted_on_a_replica_fires_where_the_runtime_answers(name: str) -> None:
    fake, replica, volume = await _world()
    arguments = _arguments(fake, volume, name)
    before = fake.calls[name]
    with contextlib.suppress(pr.PandoRuntimeError):  # a refusal still counts as a call
        await _call(fake, name, arguments)
    if fake.calls[name] == before:
        assert name not in {"check_plan", "apply", "observe", "exec"}, "the fake answers these"
        return  # answered without the runtime (a helper, a local value): nothing to fail
    for scripted_on in (fake, replica):  # one runtime: either adapter scripts its faults
        error = pr.AdapterUnavailable(f"the runtime fails {name}, as scripted")
        scripted_on.faults.fail_next(name, error)
        with pytest.raises(pr.AdapterUnavailable) as raised:
            await _call(replica, name, arguments)
        assert raised.value is error
        assert fake.faults.pending(name) == 0


async def test_a_check_plan_fault_scripted_on_a_replica_fires() -> None:
    fake = FakeAdapter()
    replica = fake.replica()
    replica.faults.fail_next("check_plan", pr.AdapterUnavailable("down"))
    with pytest.raises(pr.AdapterUnavailable):
        await replica.check_plan(BUNDLE)
    await replica.check_plan(BUNDLE)  # once only
    assert fake.calls["check_plan"] == 2, "one runtime: the fake counts its replicas' calls"


async def test_replicas_share_one_world_and_each_controls_it() -> None:
    fake = FakeAdapter()
    replica = fake.replica()
    assert replica.world is fake.world
    assert replica.fake is fake
    replica.script_image("x/web:1", ImageBehaviour(exit_code=3))
    await replica.apply(BUNDLE)
    observed = await fake.observe(pr.BundleRef("shop"))
    assert observed.workloads[0].exit_code == 3, "the replica's script ran in the fake's world"
    assert fake.bundle_ids() == replica.bundle_ids() == ["shop"]
    assert replica.writes == fake.writes > 0


async def test_closing_a_replica_closes_it_alone_and_the_fake_takes_the_runtime_along() -> None:
    fake = FakeAdapter()
    replica, other = fake.replica(), fake.replica()
    await replica.aclose()
    with pytest.raises(pr.AdapterUnavailable):
        await replica.health_check()
    await other.health_check()
    await fake.health_check()
    await fake.aclose()
    with pytest.raises(pr.AdapterUnavailable):
        await other.health_check()


async def test_each_replica_writes_as_itself(tmp_path: Any) -> None:
    settings = pr.MembershipSettings(lease_duration=1.2, renew_deadline=0.8, retry_period=0.1)
    fake = FakeAdapter({"state_file": str(tmp_path / "world.json")})
    replica = fake.replica()
    async with (
        fake.membership("a", settings) as member_a,
        replica.membership("b", settings) as member_b,
    ):
        ids = [f"app-{n}" for n in range(20)]
        with anyio.fail_after(10):
            while True:  # until both see both, and each id has exactly one owner
                members = (member_a, member_b)
                if all(m.members() == {"a", "b"} for m in members) and all(
                    member_a.owns(i) != member_b.owns(i) for i in ids
                ):
                    break
                await anyio.sleep(settings.retry_period)
        theirs = next(i for i in ids if member_b.owns(i))
        plan = pr.BundlePlan(bundle_id=theirs, workloads=BUNDLE.workloads)
        with pytest.raises(pr.NotOwner):
            await fake.apply(plan)
        await replica.apply(plan)
    await replica.aclose()
    assert not (tmp_path / "world.json").exists(), "the state file is the fake's to write"
    await fake.aclose()
    assert theirs in FakeAdapter({"state_file": str(tmp_path / "world.json")}).bundle_ids()
