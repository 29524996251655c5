"""One strict cattrs converter for every data type, to and from JSON (and YAML files).

Strict means: an unknown key, a missing required key or a value of the wrong
type is an error, and every such error is reported at once with its path
(``workloads[0].ports[1].number``). Nothing is coerced: ``"80"`` is not a port.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import cattrs
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.preconf.json import make_converter

from ._capabilities import IsolationClass
from ._errors import InvalidInput, InvalidPlan, Problem
from ._plans import BundlePlan

__all__ = [
    "converter",
    "from_json",
    "load_bundle_file",
    "structure",
    "structure_problems",
    "to_json",
    "unstructure",
]

T = TypeVar("T")

converter = make_converter(forbid_extra_keys=True, detailed_validation=True)
"""The library's converter. Register hooks for your own types on a copy, not on this one."""


def _strict(kind: type[Any], name: str, *, accept: tuple[type[Any], ...] = ()) -> None:
    allowed = (kind, *accept)

    def hook(value: Any, _: type[Any]) -> Any:
        # bool is an int subclass; a JSON true is never a number here.
        if isinstance(value, bool) and kind is not bool:
            msg = f"expected {name}, got a boolean"
            raise TypeError(msg)
        if not isinstance(value, allowed):
            msg = f"expected {name}, got {type(value).__name__}"
            raise TypeError(msg)
        return kind(value)

    converter.register_structure_hook(kind, hook)


_strict(str, "a string")
_strict(int, "an integer")
_strict(float, "a number", accept=(int,))
_strict(bool, "true or false")


def _structure_bytes(value: Any, _: type[Any]) -> bytes:
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        msg = f"expected base64 text, got {type(value).__name__}"
        raise TypeError(msg)
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as error:
        msg = f"not valid base64: {error}"
        raise ValueError(msg) from None


converter.register_unstructure_hook(bytes, lambda b: base64.b64encode(b).decode("ascii"))
converter.register_structure_hook(bytes, _structure_bytes)


def _structure_isolation(value: Any, _: type[Any]) -> IsolationClass:
    if isinstance(value, str) and value.upper() in IsolationClass.__members__:
        return IsolationClass[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool):
        return IsolationClass(value)
    names = ", ".join(m.name.lower() for m in IsolationClass)
    msg = f"expected one of {names}"
    raise ValueError(msg)


converter.register_unstructure_hook(IsolationClass, lambda c: c.name.lower())
converter.register_structure_hook(IsolationClass, _structure_isolation)


def _structure_datetime(value: Any, _: type[Any]) -> datetime:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        msg = f"expected an ISO 8601 time, got {type(value).__name__}"
        raise TypeError(msg)
    return datetime.fromisoformat(value)


converter.register_structure_hook(datetime, _structure_datetime)


def _join(path: str, part: str) -> str:
    return f"{path}{part}" if part.startswith("[") or not path else f"{path}.{part}"


def _walk(error: BaseException, path: str, out: list[Problem]) -> None:  # noqa: C901 - a branch per cattrs error kind
    if isinstance(error, ClassValidationError):
        with_notes, without = error.group_exceptions()
        for inner, note in with_notes:
            _walk(inner, _join(path, note.name), out)
        for inner in without:
            _walk(inner, path, out)
    elif isinstance(error, IterableValidationError):
        with_index, without = error.group_exceptions()
        for inner, index_note in with_index:
            index = index_note.index
            part = f"[{index}]" if isinstance(index, int) else f"[{index!r}]"
            _walk(inner, _join(path, part), out)
        for inner in without:
            _walk(inner, path, out)
    elif isinstance(error, ForbiddenExtraKeysError):
        valid = sorted(
            a.name for a in getattr(error.cl, "__attrs_attrs__", ()) if not a.name.startswith("_")
        )
        out.extend(
            Problem(
                _join(path, key),
                f"unknown key {key!r}; valid keys are {', '.join(valid)}",
                "unknown_key",
            )
            for key in sorted(error.extra_fields)
        )
    elif isinstance(error, KeyError):
        out.append(Problem(path, "required key is missing", "missing"))
    elif isinstance(error, BaseExceptionGroup):
        for member in error.exceptions:
            _walk(member, path, out)
    else:
        out.append(Problem(path, str(error) or type(error).__name__, "wrong_type"))


def structure_problems(error: BaseException) -> list[Problem]:
    """Every problem in a cattrs structuring error, each with its path."""
    out: list[Problem] = []
    _walk(error, "", out)
    return out


def structure(
    data: Any,
    cls: type[T],
    *,
    error: type[InvalidInput] = InvalidPlan,
    what: str | None = None,
) -> T:
    """Build ``cls`` from JSON-like ``data``; raise ``error`` listing every problem."""
    if not isinstance(data, Mapping) and hasattr(cls, "__attrs_attrs__"):
        raise error(
            f"{what or cls.__name__} must be a mapping",
            [Problem("", f"expected a mapping, got {type(data).__name__}", "wrong_type")],
        )
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
        raise error(f"{what or cls.__name__} is not valid", structure_problems(exc)) from None


def unstructure(value: Any) -> Any:
    """JSON-ready data (dicts, lists, strings, numbers) for any library value."""
    return converter.unstructure(value)


def to_json(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON text."""
    return json.dumps(unstructure(value), indent=indent, sort_keys=indent is not None)


def from_json(text: str | bytes, cls: type[T], *, error: type[InvalidInput] = InvalidPlan) -> T:
    """Parse JSON text into ``cls``, strictly."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error("not valid JSON", [Problem("", str(exc), "syntax")]) from None
    return structure(data, cls, error=error)


_Loader = Callable[[str], Any]


def _yaml_loader() -> _Loader:
    try:
        import yaml  # noqa: PLC0415 - optional dependency, imported on use
    except ImportError:  # pragma: no cover - PyYAML is a dependency
        msg = "reading YAML needs PyYAML: pip install pyyaml"
        raise InvalidPlan(msg) from None

    def load(text: str) -> Any:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidPlan("not valid YAML", [Problem("", str(exc), "syntax")]) from None

    return load


def load_bundle_file(path: str | Path) -> BundlePlan:
    """Read a bundle plan from a ``.json``, ``.yaml`` or ``.yml`` file, strictly.

    Carried files' ``content`` is base64 in the file. Only structure is checked
    here; call :func:`validate_plan` for the rules of a good plan.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        return from_json(text, BundlePlan)
    return structure(_yaml_loader()(text), BundlePlan, what=f"bundle file {path.name}")
