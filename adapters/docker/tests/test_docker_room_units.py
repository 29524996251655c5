"""Pure parts of the engine as a fleet member: what holds room, the room, the runtime key."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pando_runtime_docker import DockerAdapter
from pando_runtime_docker.api import EngineTransport
from pando_runtime_docker.cache import ContainerCache, ContainerView, view_from_inspect
from pando_runtime_docker.endpoint import Endpoint, EngineLink
from pando_runtime_docker.features._capacity import engine_room, share_of
from pando_runtime_docker.features._records import engine_address
from pando_runtime_docker.manifests import Naming

import pando_runtime as pr
from pando_runtime.fleet import BundleRecords, RequestsView, RuntimeKey

NAMING = Naming(owner="pando")
MiB = 1024**2
NEVER = "0001-01-01T00:00:00Z"


def _inspect(limits: dict[str, int], **state: object) -> dict[str, object]:
    labels = {"io.pando.owner": "pando", "io.pando.bundle": "app", "io.pando.workload": "web"}
    return {
        "Id": "c1",
        "Created": "2026-12-04T17:00:00Z",
        "Config": {"Labels": labels},
        "HostConfig": limits,
        "State": {"Status": "running", "Running": True, "StartedAt": "2026-12-04T17:00:01Z"}
        | state,
    }


LIMITED = {"NanoCpus": 250_000_000, "Memory": 64 * MiB, "MemorySwap": 64 * MiB}


@pytest.mark.parametrize(
    ("state", "holds"),
    [
        ({}, True),
        ({"Status": "created", "Running": False, "StartedAt": NEVER}, True),
        ({"Status": "exited", "Running": False, "ExitCode": 0}, False),
        (
            {"Status": "created", "Running": False, "StartedAt": NEVER, "Error": "exec: nope"},
            False,
        ),
    ],
    ids=["running", "created, not started yet", "exited", "refused at start"],
)
def test_a_container_holds_its_limits_from_its_create_until_it_ends(
    state: dict[str, object], holds: bool
) -> None:
    view = view_from_inspect(_inspect(LIMITED, **state), NAMING)
    assert view is not None
    assert view.limits == (250, 64 * MiB)
    assert view.holds_room is holds


def test_a_container_without_limits_holds_nothing() -> None:
    view = view_from_inspect(_inspect({"NanoCpus": 0, "Memory": 0}), NAMING)
    assert view is not None
    assert (view.holds_room, view.limits) == (True, (0, 0))


def test_the_room_is_the_machine_less_every_other_bundles_limits_never_below_nothing() -> None:
    held = {"a": (500, 256 * MiB), "b": (250, 64 * MiB)}
    machine = (2000, 1024 * MiB)
    assert engine_room(machine, held) == pr.Fit(cpu_millis=1250, memory_bytes=704 * MiB)
    assert engine_room(machine, held, "a") == pr.Fit(cpu_millis=1750, memory_bytes=960 * MiB)
    assert engine_room(machine, {"big": (4000, 2048 * MiB)}) == pr.Fit(cpu_millis=0, memory_bytes=0)


def _cache() -> ContainerCache:
    return ContainerCache(
        EngineTransport(
            EngineLink(Endpoint(host="unix:///nowhere.sock", origin="a test"), connect_timeout=1),
            connect_timeout=1,
            read_timeout=1,
            answer_timeout=1,
        ),
        NAMING,
        max_staleness=1,
        probe_interval=1,
        read_timeout=1,
    )


def _created(container_id: str, bundle_id: str, limits: tuple[int, int]) -> ContainerView:
    return ContainerView(
        id=container_id,
        bundle_id=bundle_id,
        workload="web",
        spec="s",
        created=datetime.now(UTC),
        limits=limits,
    )


def _event(action: str) -> dict[str, object]:
    labels = {"io.pando.owner": "pando", "io.pando.bundle": "app", "io.pando.workload": "web"}
    return {"Type": "container", "Action": action, "Actor": {"ID": "c1", "Attributes": labels}}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_container_apply_created_counts_at_once_whichever_comes_first() -> None:
    cache = _cache()
    cache.created(_created("c1", "app", (250, 64 * MiB)))  # before its event
    assert cache.limits_by_bundle() == {"app": (250, 64 * MiB)}
    await cache._on_event(_event("create"))  # the event keeps what apply wrote
    assert cache.limits_by_bundle() == {"app": (250, 64 * MiB)}
    await cache._on_event(_event("destroy"))
    assert cache.limits_by_bundle() == {}
    await cache._on_event(_event("create"))  # the event first: apply adds the limits
    assert cache.limits_by_bundle() == {"app": (0, 0)}
    cache.created(_created("c1", "app", (250, 64 * MiB)))
    assert cache.limits_by_bundle() == {"app": (250, 64 * MiB)}
    assert cache.bundle_ids() == {"app"}


def test_one_engine_has_one_address_however_its_host_is_spelled() -> None:
    assert engine_address("unix:///var/run//docker.sock") == "unix:///var/run/docker.sock"
    assert engine_address("unix:///run/x/../docker.sock") == "unix:///run/docker.sock"
    assert engine_address("tcp://Engine.Example:2375/") == "tcp://engine.example:2375"
    assert engine_address("http://engine.example:2375") == "tcp://engine.example:2375"
    assert engine_address("tcp://[0:0:0:0:0:0:0:1]:2375") == "tcp://[::1]:2375"
    assert engine_address("tcp://engine.example:2375") != engine_address(
        "tcp://engine.example:2376"
    )


def _adapter(**settings: str) -> DockerAdapter:
    return DockerAdapter({"host": "unix:///var/run/docker.sock", **settings})


def test_the_runtime_key_is_the_engine_and_the_owner_label() -> None:
    same = _adapter(host="unix:///var/run/./docker.sock")
    assert same.runtime_key() == _adapter().runtime_key()
    assert _adapter().runtime_key() == "unix:///var/run/docker.sock#io.pando.owner=pando"
    assert _adapter(owner="other").runtime_key() != _adapter().runtime_key()
    assert _adapter(label_prefix="org.other").runtime_key() != _adapter().runtime_key()
    assert _adapter(host="unix:///run/other.sock").runtime_key() != _adapter().runtime_key()


def test_a_fleet_takes_the_engine_as_a_member_and_refuses_two_on_one_engine_and_owner() -> None:
    adapter = _adapter()
    assert isinstance(adapter, BundleRecords)
    assert isinstance(adapter, RequestsView)
    assert isinstance(adapter, RuntimeKey)
    assert adapter.requests_by_bundle() == {}
    assert not adapter.known_to_hold("app")  # not open: nothing known, no call
    docker = {"adapter": "docker", "settings": {"host": "unix:///var/run/docker.sock"}}
    with pytest.raises(pr.InvalidConfig) as refused:
        pr.load_adapter("fleet", {"members": {"a": docker, "b": docker}})
    assert [(p.path, p.code) for p in refused.value.problems] == [
        ("members['b'].settings", "conflict")
    ]
    other_owner = {**docker, "settings": {**docker["settings"], "owner": "b"}}
    pr.load_adapter("fleet", {"members": {"a": docker, "b": other_owner}})


def test_an_operators_share_of_the_machine_caps_the_totals() -> None:
    """``capacity_*`` settings replace what the daemon reports, each one that is set."""
    machine = (2000, 8 * 1024**3)
    assert share_of(machine, (None, None)) == machine
    assert share_of(machine, (500, 1024**3)) == (500, 1024**3), "some kept for the system"
    assert share_of(machine, (None, 64 * 1024**3)) == (2000, 64 * 1024**3), "overcommitted"
