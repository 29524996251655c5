"""Fencing a member's writes, without a cluster: tokens, stamps, the policy's refusal, and the
session's conditional write over a scripted transport."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pando_runtime_kubernetes._info import KubernetesConfig
from pando_runtime_kubernetes._names import ANN_FENCE, ANN_WRITTEN_UNDER
from pando_runtime_kubernetes.api._errors import ApiError
from pando_runtime_kubernetes.features._fencing import FENCE_MANAGER, Fences
from pando_runtime_kubernetes.session._errors import WriteConflict
from pando_runtime_kubernetes.session._fence_token import (
    FenceToken,
    creation_stamp,
    next_stamp,
    refused_stamp,
    stamp_owner,
    with_token,
    writing_under,
)
from pando_runtime_kubernetes.session._session import ClusterSession

from pando_runtime import AdapterUnavailable, NotOwner
from pando_runtime.plugin import MembershipSlot

pytestmark = pytest.mark.anyio

REFUSAL = (
    "admission webhook denied: ValidatingAdmissionPolicy 'pando-runtime-fence' with binding "
    "'pando-runtime-fence' denied request: pando: fenced: namespace pando-app is stamped "
    "7/replica-b; this write carries 6/replica-a"
)


def _secret(ns: str) -> dict[str, Any]:
    return {"kind": "Secret", "metadata": {"name": "s", "namespace": ns}, "data": {}}


def test_a_stamp_moves_to_the_next_epoch_and_names_its_replica() -> None:
    assert next_stamp(None, "a") == "1/a"
    assert next_stamp("7/b", "a") == "8/a"
    assert next_stamp("not-ours", "a") == "1/a", "a stamp this adapter did not write restarts"
    assert stamp_owner("8/a") == "a"
    assert stamp_owner("garbage") is None
    assert stamp_owner(None) is None
    assert creation_stamp("a", now=1_800_000_000.5) == "1800000000500/a"
    assert next_stamp(creation_stamp("a", now=1_800_000_000.5), "b") == "1800000000501/b"


def test_writes_carry_the_token_only_in_its_namespace_and_only_while_it_is_set() -> None:
    body = _secret("pando-app")
    assert with_token(body, creating=True) is body, "no token: the body is sent as it is"
    with writing_under(FenceToken("pando-app", "3/a")):
        sent = with_token(body, creating=False)
        elsewhere = with_token(_secret("pando-other"), creating=False)
        namespace = {"kind": "Namespace", "metadata": {"name": "pando-app"}}
        created = with_token(namespace, creating=True)
        applied = with_token(namespace, creating=False)
    assert sent["metadata"]["annotations"] == {ANN_WRITTEN_UNDER: "3/a"}
    assert "annotations" not in body["metadata"], "the plan's body is not changed in place"
    assert "annotations" not in elsewhere["metadata"]
    assert created["metadata"]["annotations"] == {ANN_WRITTEN_UNDER: "3/a", ANN_FENCE: "3/a"}
    assert applied["metadata"]["annotations"] == {ANN_WRITTEN_UNDER: "3/a"}, (
        "an apply never carries the stamp: an old owner's apply cannot move it back"
    )


def test_the_policys_refusal_names_the_stamp_and_other_errors_do_not() -> None:
    assert refused_stamp(REFUSAL) == "7/replica-b"
    assert refused_stamp('pods "x" is forbidden: User cannot create') is None


class _Scripted:
    """A transport whose calls answer as the test says, and which records them."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, Any, Mapping[str, Any] | None]] = []
        self.cluster: str | None = None
        self.observer: Any = None

    async def get(self, path: str, **query: Any) -> dict[str, Any]:
        return await self.request("GET", path)

    async def apply(self, path: str, body: Mapping[str, Any], manager: str) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        read_timeout: float | None = None,
    ) -> dict[str, Any]:
        self.calls.append((method, path, body, query))
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return dict(answer)


def _session(answers: list[Any]) -> tuple[ClusterSession, _Scripted]:
    transport = _Scripted(answers)
    return ClusterSession(KubernetesConfig(), transport=transport), transport  # type: ignore[arg-type]


async def test_a_conditional_write_sends_its_version_and_a_409_is_a_write_conflict() -> None:
    session, transport = _session([ApiError(409, "Conflict"), {"metadata": {}}])
    body = {"metadata": {"name": "x"}}
    with pytest.raises(WriteConflict) as caught:
        await session.writer.write_if("write x", "/api/v1/x", body, version="5")
    assert caught.value.details["version"] == "5"
    assert transport.calls[0][0] == "PUT"
    assert transport.calls[0][2]["metadata"]["resourceVersion"] == "5"
    await session.writer.write_if("create x", "/api/v1/xs", body, version=None)
    assert transport.calls[1][0] == "POST"
    assert "resourceVersion" not in transport.calls[1][2]["metadata"]


async def test_a_conditional_write_that_fails_otherwise_is_unavailable_or_not_owner() -> None:
    refused = ApiError(403, "Forbidden", {"message": REFUSAL})
    session, _ = _session([ApiError(500, "Internal"), refused])
    with pytest.raises(AdapterUnavailable):
        await session.writer.write_if("write x", "/api/v1/x", {"metadata": {}}, version="1")
    with pytest.raises(NotOwner) as caught:
        await session.writer.write_if("write x", "/api/v1/x", {"metadata": {}}, version="1")
    assert caught.value.details["owner"] == "replica-b"
    assert caught.value.details["stamp"] == "7/replica-b"


async def test_a_refused_write_is_not_owner_at_once_never_retried_as_a_403() -> None:
    refused = ApiError(403, "Forbidden", {"message": REFUSAL})
    session, transport = _session([refused, {"kind": "Secret"}])
    with pytest.raises(NotOwner) as caught:
        await session.writer.apply(_secret("pando-app"))
    assert caught.value.details["owner"] == "replica-b"
    assert len(transport.calls) == 1, "an RBAC-propagation 403 is retried; a refusal is not"


def _namespace(version: str, stamp: str | None) -> dict[str, Any]:
    annotations = {ANN_FENCE: stamp} if stamp else {}
    return {
        "kind": "Namespace",
        "metadata": {
            "name": "pando-app",
            "resourceVersion": version,
            "labels": {"app.kubernetes.io/managed-by": "pando"},
            "annotations": annotations,
        },
    }


async def test_a_stamp_is_a_conditional_merge_patch_to_the_next_epoch() -> None:
    session, transport = _session([_namespace("10", "3/b"), _namespace("11", "4/a")])
    fences = Fences(session, MembershipSlot())
    token = await fences._stamp("pando-app", "app", "a")
    assert token == FenceToken("pando-app", "4/a")
    method, _, body, query = transport.calls[1]
    assert method == "PATCH"
    assert body["metadata"]["resourceVersion"] == "10"
    assert body["metadata"]["annotations"] == {ANN_FENCE: "4/a", ANN_WRITTEN_UNDER: "4/a"}
    assert query == {"fieldManager": FENCE_MANAGER}
    assert fences.stamps == 1


async def test_of_two_stamps_on_one_version_one_wins_and_the_other_is_not_owner() -> None:
    session, _ = _session(
        [_namespace("10", "3/b"), ApiError(409, "Conflict"), _namespace("11", "4/c")]
    )
    fences = Fences(session, MembershipSlot())
    with pytest.raises(NotOwner) as caught:
        await fences._stamp("pando-app", "app", "a")
    assert caught.value.details["owner"] == "c", "the winner's stamp names it"
    assert fences.stamps == 0


async def test_a_stamp_conflicting_with_another_change_reads_again_and_stamps() -> None:
    session, _ = _session(
        [
            _namespace("10", "3/b"),
            ApiError(409, "Conflict"),
            _namespace("11", "3/b"),  # a label changed, the stamp did not
            _namespace("11", "3/b"),
            _namespace("12", "4/a"),
        ]
    )
    fences = Fences(session, MembershipSlot())
    assert (await fences._stamp("pando-app", "app", "a")).stamp == "4/a"


async def test_an_absent_namespace_is_stamped_by_its_create_and_nothing_is_written() -> None:
    session, transport = _session([ApiError(404, "Not Found")])
    fences = Fences(session, MembershipSlot())
    stamp = (await fences._stamp("pando-app", "app", "a")).stamp
    assert stamp_owner(stamp) == "a"
    assert int(stamp.split("/")[0]) > 1_700_000_000_000, "a new namespace's epoch: the time in ms"
    assert [c[0] for c in transport.calls] == ["GET"]
    assert fences.stamps == 0


async def test_a_host_that_never_joins_is_guarded_by_nothing_and_sends_no_token() -> None:
    session, transport = _session([])
    fences = Fences(session, MembershipSlot())
    async with fences.guarding("app"):
        assert with_token(_secret("pando-app"), creating=False) == _secret("pando-app")
    assert transport.calls == [], "no read, no write"


async def test_a_members_namespace_delete_is_made_on_its_stamped_version() -> None:
    session, transport = _session(
        [
            _namespace("10", "4/a"),
            ApiError(409, "Conflict"),  # the stamp moved between the read and the delete
            _namespace("12", "5/b"),
        ]
    )
    with writing_under(FenceToken("pando-app", "4/a")), pytest.raises(NotOwner) as caught:
        await session.writer.delete(None, "namespaces", "pando-app")
    assert caught.value.details["owner"] == "b"
    method, _, body, _ = transport.calls[1]
    assert method == "DELETE"
    assert body == {"preconditions": {"resourceVersion": "10"}}


async def test_a_members_namespace_delete_under_another_stamp_is_not_sent() -> None:
    session, transport = _session([_namespace("10", "5/b")])
    with writing_under(FenceToken("pando-app", "4/a")), pytest.raises(NotOwner):
        await session.writer.delete(None, "namespaces", "pando-app")
    assert [c[0] for c in transport.calls] == ["GET"]
