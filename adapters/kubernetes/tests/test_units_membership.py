"""Leases as the Kubernetes adapter writes and reads them (no cluster)."""

from __future__ import annotations

from pando_runtime_kubernetes.features._membership import lease_object, stored_lease

from pando_runtime.plugin import LeaseRecord


def test_a_lease_reads_back_as_written_and_shows_kubectl_its_holder() -> None:
    record = LeaseRecord(holder="a", renewals=7, duration=0.6, view=("a", "b"))
    obj = lease_object("pando", "members", "a", record)
    assert obj["metadata"]["name"] == "pando-replica-a"
    assert obj["spec"]["holderIdentity"] == "a"
    assert obj["spec"]["leaseDurationSeconds"] == 1, "whole seconds, at least 1"
    obj["metadata"]["resourceVersion"] = "42"
    stored = stored_lease(obj)
    assert stored is not None
    assert (stored.name, stored.record, stored.version) == ("a", record, "42")


def test_a_singletons_lease_has_no_members_and_a_foreign_lease_is_ignored() -> None:
    record = LeaseRecord(holder="b", renewals=0, duration=15.0)
    obj = lease_object("pando", "singletons", "catalog-sync", record)
    assert obj["metadata"]["name"] == "pando-singleton-catalog-sync"
    assert "pando.dev/members" not in obj["metadata"]["annotations"]
    obj["metadata"]["resourceVersion"] = "1"
    assert stored_lease(obj) is not None
    foreign = {"metadata": {"name": "kube-scheduler", "resourceVersion": "9"}, "spec": {}}
    assert stored_lease(foreign) is None
