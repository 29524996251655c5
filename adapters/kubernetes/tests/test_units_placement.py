"""Placement over several clusters, placements in flight counted: the pure logic."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from _kubeconfigs import kubeconfig_file
from pando_runtime_kubernetes._placement import (
    Reservations,
    choose,
    largest_request,
    room_left,
    total_request,
    waiting,
)
from pando_runtime_kubernetes.cache._capacity import BundlePods

from pando_runtime import (
    AdapterUnavailable,
    BundlePlan,
    Fit,
    InvalidConfig,
    Resources,
    WorkloadPlan,
)

MiB = 1024**2
ROOM = Fit(cpu_millis=4000, memory_bytes=8192 * MiB)
APP = (100, 128 * MiB)


def _plan(bundle_id: str, *sizes: tuple[int, int]) -> BundlePlan:
    workloads = tuple(
        WorkloadPlan(name=f"w{i}", image="x:1", resources=Resources(cpu_millis=c, memory_bytes=m))
        for i, (c, m) in enumerate(sizes)
    )
    return BundlePlan(bundle_id=bundle_id, workloads=workloads, first_deploy=True)


def _cluster_of(error: BaseException) -> object:
    """The cluster the error (or the one it was raised from) names."""
    cause = error.__cause__
    return getattr(cause, "details", {}).get("cluster")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _burst(apps: int, clusters: dict[str, Fit], reservations: Reservations) -> Counter[str]:
    """``apps`` placements decided one after the other, none of them counted by a view yet."""
    where: Counter[str] = Counter()
    for i in range(apps):
        bundle_id = f"app-{i}"
        rooms = {
            name: room_left(fit, reservations.held(name, {})) for name, fit in clusters.items()
        }
        chosen = choose(bundle_id, APP, rooms, "a")
        reservations.reserve(bundle_id, chosen, APP)
        where[chosen] += 1
    return where


def test_requests_of_a_plan_are_its_largest_workload_and_its_sum() -> None:
    plan = _plan("p", (100, 64 * MiB), (300, 32 * MiB))
    assert largest_request(plan) == (300, 64 * MiB)
    assert total_request(plan) == (400, 96 * MiB)


def test_a_burst_over_clusters_of_equal_room_is_split_evenly() -> None:
    where = _burst(20, {"a": ROOM, "b": ROOM}, Reservations())
    assert where == {"a": 10, "b": 10}


def test_without_counting_placements_in_flight_a_burst_goes_to_one_cluster() -> None:
    """What the race was: every decision sees the same room (a reservation held nowhere)."""
    where: Counter[str] = Counter()
    for i in range(20):
        where[
            choose(
                f"app-{i}",
                APP,
                {"a": ROOM, "b": Fit(cpu_millis=4000, memory_bytes=8192 * MiB - 1)},
                "b",
            )
        ] += 1
    assert where == {"a": 20}


def test_a_burst_over_unequal_clusters_fills_the_roomier_first_then_alternates() -> None:
    small = Fit(cpu_millis=4000, memory_bytes=8192 * MiB - 4 * APP[1])
    where = _burst(20, {"a": ROOM, "b": small}, Reservations())
    assert where == {"a": 12, "b": 8}


def test_equal_rooms_are_broken_by_the_bundle_id_not_by_the_clusters_order() -> None:
    picks = {choose(f"app-{i}", APP, {"a": ROOM, "b": ROOM}, "a") for i in range(32)}
    assert picks == {"a", "b"}, "ties spread"
    for i in range(32):
        assert choose(f"app-{i}", APP, {"a": ROOM, "b": ROOM}, "a") == choose(
            f"app-{i}", APP, {"b": ROOM, "a": ROOM}, "b"
        )


def test_a_cluster_the_app_fits_wins_over_a_roomier_one_it_does_not() -> None:
    wide = Fit(cpu_millis=50, memory_bytes=64 * 1024 * MiB)  # memory, but no CPU for it
    assert choose("x", APP, {"a": wide, "b": ROOM}, "a") == "b"
    assert choose("x", APP, {"a": None, "b": None}, "b") == "b", "no node anywhere: the default"


def test_a_reservation_holds_until_the_clusters_view_counts_the_bundle() -> None:
    reservations = Reservations()
    reservations.reserve("x", "a", (300, 96 * MiB))
    assert reservations.held("a", {}) == (300, 96 * MiB)
    assert reservations.held("b", {}) == (0, 0), "only on its cluster"
    one_pod = {"x": BundlePods(placed=(0, 0), waiting=(100, 64 * MiB))}
    assert reservations.held("a", one_pod) == (200, 32 * MiB), "the rest of its pods"
    both = {"x": BundlePods(placed=(200, 32 * MiB), waiting=(100, 64 * MiB))}
    assert reservations.held("a", both) == (0, 0)
    assert reservations.clusters() == {}, "counted: dropped"


def test_a_failed_placement_releases_its_reservation_and_a_lost_one_expires() -> None:
    clock = Clock()
    reservations = Reservations(clock=clock, hold=60.0)
    reservations.reserve("failed", "a", APP)
    reservations.reserve("lost", "a", APP)
    reservations.release("failed")
    assert reservations.held("a", {}) == APP
    clock.now = 60.0
    assert reservations.held("a", {}) == (0, 0)
    assert reservations.clusters() == {}


def test_pods_waiting_for_a_node_take_room_whoever_placed_them() -> None:
    seen = {
        "mine": BundlePods(placed=(100, MiB), waiting=(0, 0)),
        "other-replica": BundlePods(placed=(0, 0), waiting=(200, 256 * MiB)),
        "half": BundlePods(placed=(50, MiB), waiting=(50, MiB)),
    }
    assert waiting(seen) == (250, 257 * MiB)
    assert room_left(ROOM, waiting(seen), (50, MiB)) == Fit(
        cpu_millis=3700, memory_bytes=8192 * MiB - 258 * MiB
    )
    assert room_left(Fit(cpu_millis=10, memory_bytes=10), (20, 20)) == Fit(
        cpu_millis=0, memory_bytes=0
    ), "never below nothing"


def test_the_membership_cluster_must_be_one_of_the_contexts() -> None:
    from pando_runtime_kubernetes._multi import MultiClusterAdapter  # noqa: PLC0415

    with pytest.raises(InvalidConfig) as caught:
        MultiClusterAdapter(
            {"contexts": ["east"], "membership_cluster": "west", "default_cluster": "south"}
        )
    assert [(p.path, p.code) for p in caught.value.problems] == [
        ("default_cluster", "unknown"),
        ("membership_cluster", "unknown"),
    ]
    assert caught.value.code == "INVALID_CONFIG"
    assert caught.value.remedy


@pytest.mark.anyio
async def test_the_membership_cluster_is_checked_against_the_kubeconfig(tmp_path: Path) -> None:
    from pando_runtime_kubernetes._multi import MultiClusterAdapter  # noqa: PLC0415

    config = kubeconfig_file(tmp_path / "kubeconfig", "east", "west", current="west")
    bad = MultiClusterAdapter({"kubeconfig": str(config), "membership_cluster": "north"})
    with pytest.raises(InvalidConfig) as caught:
        async with bad.membership("a"):
            pass
    assert [p.path for p in caught.value.problems] == ["membership_cluster"]
    named = MultiClusterAdapter({"kubeconfig": str(config), "membership_cluster": "east"})
    with pytest.raises(AdapterUnavailable) as unreachable:  # nothing listens on those ports
        async with named.membership("a"):
            pass
    assert _cluster_of(unreachable.value) == "east", "its Leases are read there"
    assert named.membership_cluster == "east"
    assert named.default_cluster == "west"
    unset = MultiClusterAdapter({"kubeconfig": str(config)})
    with pytest.raises(AdapterUnavailable) as unreachable:
        async with unset.membership("a"):
            pass
    assert _cluster_of(unreachable.value) == "west", "unset: the default cluster"


def test_in_a_read_scope_a_placed_pod_stays_reserved_its_room_was_read_before() -> None:
    reservations = Reservations()
    reservations.reserve("x", "a", APP)
    placed = {"x": BundlePods(placed=APP, waiting=(0, 0))}
    assert reservations.held("a", placed, fit_is_fresh=False) == APP, "the scope's room lacks it"
    waiting_now = {"x": BundlePods(placed=(0, 0), waiting=APP)}
    assert reservations.held("a", waiting_now, fit_is_fresh=False) == (0, 0), "counted waiting"
    assert reservations.clusters() == {"x": "a"}, "kept for the scope's next decision"
    assert reservations.held("a", placed) == (0, 0), "a fresh room counts it: dropped"
    assert reservations.clusters() == {}
