"""The fencing token a member's writes carry, and reading the admission policy's refusal.

A member of a membership writes an app's namespace under a **stamp**, ``<epoch>/<replica>``
in the namespace's ``pando.dev/fence`` annotation; while the token is set (:func:`writing_under`)
every object the session writes in that namespace carries it in ``pando.dev/written-under``, and
the namespace's own create carries the stamp itself. The admission policy
``pando-runtime-fence`` (deploy/admission.yaml) refuses a write whose token is not the stamp;
:func:`refused_stamp` reads the stamp back from its message. Pure: no I/O here.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from .._names import ANN_FENCE, ANN_WRITTEN_UNDER

__all__ = [
    "FenceToken",
    "creation_stamp",
    "current_token",
    "next_stamp",
    "refused_stamp",
    "stamp_of",
    "stamp_owner",
    "with_token",
    "writing_under",
]

REFUSAL = "pando: fenced:"
"""How the policy's refusals begin (deploy/admission.yaml)."""

_REFUSED = re.compile(r"pando: fenced: namespace \S+ is stamped (\S*);")
_STAMP = re.compile(r"^(\d+)/([a-z0-9]([-a-z0-9]*[a-z0-9])?)$")


@attrs.frozen(slots=True)
class FenceToken:
    """The ownership a write is made under: the app's namespace and its stamp."""

    namespace: str
    stamp: str


_TOKEN: contextvars.ContextVar[FenceToken | None] = contextvars.ContextVar(
    "pando_kubernetes_fence", default=None
)


@contextlib.contextmanager
def writing_under(token: FenceToken) -> Iterator[None]:
    """Within the block (this task and those it starts), writes carry ``token``."""
    reset = _TOKEN.set(token)
    try:
        yield
    finally:
        _TOKEN.reset(reset)


def current_token() -> FenceToken | None:
    """The token writes carry now (``None``: not a member's write; nothing is added)."""
    return _TOKEN.get()


def with_token(body: Mapping[str, Any], *, creating: bool) -> Mapping[str, Any]:
    """``body`` as a write under the current token sends it (``body`` itself when none applies).

    Objects in the token's namespace, and the namespace itself, carry the token; the
    namespace's create carries the stamp too (an apply never does: the stamp is moved only
    by a conditional update, so an apply of an old owner cannot move it back).
    """
    token = _TOKEN.get()
    meta = body.get("metadata") or {}
    if token is None:
        return body
    is_namespace = body.get("kind") == "Namespace" and meta.get("name") == token.namespace
    if not is_namespace and meta.get("namespace") != token.namespace:
        return body
    annotations = {**(meta.get("annotations") or {}), ANN_WRITTEN_UNDER: token.stamp}
    if is_namespace and creating:
        annotations[ANN_FENCE] = token.stamp
    return {**body, "metadata": {**meta, "annotations": annotations}}


def stamp_of(body: Mapping[str, Any] | None) -> str | None:
    """The stamp on a namespace object (``None``: never stamped, or absent)."""
    annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
    stamp = annotations.get(ANN_FENCE)
    return str(stamp) if stamp else None


def _parsed(stamp: str | None) -> tuple[int, str] | None:
    match = _STAMP.match(stamp or "")
    return (int(match.group(1)), match.group(2)) if match else None


def stamp_owner(stamp: str | None) -> str | None:
    """The replica a stamp names (``None`` for none, or one this adapter did not write)."""
    parsed = _parsed(stamp)
    return parsed[1] if parsed else None


def next_stamp(current: str | None, replica: str) -> str:
    """The stamp that takes over from ``current``: the next epoch, for ``replica``."""
    parsed = _parsed(current)
    return f"{(parsed[0] if parsed else 0) + 1}/{replica}"


def creation_stamp(replica: str, now: float | None = None) -> str:
    """The stamp a namespace's create carries: its epoch is the time in milliseconds.

    Not 1: a namespace deleted and made again must not take a stamp its earlier incarnation
    had (an old write of this replica, held since, would carry it). ``now``: seconds since
    the epoch (default: the clock).
    """
    return f"{int((time.time() if now is None else now) * 1000)}/{replica}"


def refused_stamp(message: str) -> str | None:
    """The namespace's stamp named in the fence policy's refusal (``None``: another error)."""
    if REFUSAL not in message:
        return None
    match = _REFUSED.search(message)
    return match.group(1) if match else ""
