"""One strict cattrs converter for every data type, to and from JSON (and YAML files).

Strict means: an unknown key, a missing required key or a value of the wrong
type is an error, and every such error is reported at once with its path
(``workloads[0].ports[1].number``). Nothing is coerced: ``"80"`` is not a port.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.preconf.json import make_converter

from .._contract._capabilities import IsolationClass
from .._contract._errors import InvalidInput, InvalidPlan, Problem
from .._contract._plans import BundlePlan, CarriedFile
from ._validation import MAX_CARRIED_FILES_BYTES, carried_file_too_large

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


class _InputProblem(ValueError):
    """One problem found by a structuring hook, with its own code (see :func:`_walk`)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def _decode_base64(value: str, *, limit: int | None = None, path: str = "") -> bytes:
    # Line breaks and spaces are allowed: YAML block scalars wrap long base64.
    compact = "".join(value.split())
    if limit is not None:
        size = len(compact) * 3 // 4 - len(compact) + len(compact.rstrip("="))
        if size > limit:
            raise _InputProblem(carried_file_too_large(path, size), "too_large")
    try:
        return base64.b64decode(compact, validate=True)
    except binascii.Error as error:
        msg = f"not valid base64: {error}"
        raise ValueError(msg) from None


def _structure_bytes(value: Any, _: type[Any]) -> bytes:
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        msg = f"expected base64 text, got {type(value).__name__}"
        raise TypeError(msg)
    return _decode_base64(value)


converter.register_unstructure_hook(bytes, lambda b: base64.b64encode(b).decode("ascii"))
converter.register_structure_hook(bytes, _structure_bytes)


_CONTENT_KEYS = ("content", "text", "content_base64")
_CARRIED_FILE_KEYS = ("path", *_CONTENT_KEYS, "encoding", "mode")
_ENCODINGS = ("text", "base64")
# Control characters other than tab and line breaks make a file binary: base64 keeps it legible.
_BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _file_text(content: bytes) -> str | None:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _BINARY.search(text) else text


def _unstructure_carried_file(carried: CarriedFile) -> dict[str, Any]:
    text = _file_text(carried.content)
    body = (
        {"content_base64": base64.b64encode(carried.content).decode("ascii")}
        if text is None
        else {"content": text}
    )
    return {"path": carried.path, **body, "mode": carried.mode}


def _noted(error: Exception, key: str) -> Exception:
    """Tag ``error`` with the attribute it belongs to, as cattrs does, so its path names it."""
    note = AttributeValidationNote(f"Structuring class CarriedFile @ attribute {key}", key, Any)
    error.__notes__ = [*getattr(error, "__notes__", []), note]
    return error


def _file_content(value: Mapping[str, Any], key: str, path: str) -> bytes:
    raw = value[key]
    if isinstance(raw, bytes):
        content = raw
    elif not isinstance(raw, str):
        msg = f"expected the file's content as a string, got {type(raw).__name__}"
        raise TypeError(msg)
    elif key == "content_base64" or (key == "content" and value.get("encoding") == "base64"):
        content = _decode_base64(raw, limit=MAX_CARRIED_FILES_BYTES, path=path)
    else:
        content = raw.encode("utf-8")
    if len(content) > MAX_CARRIED_FILES_BYTES:
        raise _InputProblem(carried_file_too_large(path, len(content)), "too_large")
    return content


def _file_field(value: Mapping[str, Any], key: str, kind: type[T], errors: list[Exception]) -> T:
    try:
        return converter.structure(value[key], kind)
    except (KeyError, TypeError) as error:
        errors.append(_noted(error, key))
        return kind()


def _file_body(value: Mapping[str, Any], path: str, errors: list[Exception]) -> bytes:
    given = [k for k in _CONTENT_KEYS if k in value]
    problem: _InputProblem | None = None
    if value.get("encoding", "text") not in _ENCODINGS:
        problem = _InputProblem(f"expected one of {', '.join(_ENCODINGS)}", "wrong_type")
    elif "encoding" in value and given != ["content"]:
        problem = _InputProblem("encoding only applies to content", "conflict")
    if problem is not None:
        errors.append(_noted(problem, "encoding"))
    if not given:
        errors.append(
            _InputProblem(
                "a carried file needs its content: content (or text) as text, "
                "or content_base64 as base64",
                "missing",
            )
        )
    elif len(given) > 1:
        errors.append(
            _InputProblem(f"give the content once, not as {' and '.join(given)}", "conflict")
        )
    elif problem is None:
        try:
            return _file_content(value, given[0], path)
        except (TypeError, ValueError) as error:
            errors.append(_noted(error, given[0]))
    return b""


def _structure_carried_file(value: Any, _: type[Any]) -> CarriedFile:
    """A carried file from ``content``/``text`` (text) or ``content_base64`` (base64).

    ``encoding: base64`` marks a ``content`` string as base64. Every problem is
    reported with the key it is about; a file over the size limit names its path.
    """
    if isinstance(value, CarriedFile):
        return value
    if not isinstance(value, Mapping):
        msg = f"expected a mapping, got {type(value).__name__}"
        raise TypeError(msg)
    errors: list[Exception] = []
    unknown = {k for k in value if k not in _CARRIED_FILE_KEYS}
    if unknown:
        errors.append(ForbiddenExtraKeysError("", CarriedFile, unknown))
    path = _file_field(value, "path", str, errors)
    mode = _file_field(value, "mode", int, errors) if "mode" in value else 0o644
    content = _file_body(value, path, errors)
    if errors:
        raise ClassValidationError("While structuring CarriedFile", errors, CarriedFile)
    return CarriedFile(path=path, content=content, mode=mode)


converter.register_unstructure_hook(CarriedFile, _unstructure_carried_file)
converter.register_structure_hook(CarriedFile, _structure_carried_file)


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


_INPUT_KEYS: dict[type[Any], tuple[str, ...]] = {CarriedFile: _CARRIED_FILE_KEYS}
"""The keys a type takes in JSON, where they differ from its attributes."""


def _join(path: str, part: str) -> str:
    return f"{path}{part}" if part.startswith("[") or not path else f"{path}.{part}"


def _own_problems(error: _InputProblem | InvalidInput, path: str) -> list[Problem]:
    """The problems a hook found, or a class's own checks raised as it was made, at ``path``."""
    if isinstance(error, _InputProblem):
        return [Problem(path, str(error), error.code)]
    return [attrs.evolve(p, path=_join(path, p.path) if p.path else path) for p in error.problems]


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
            _INPUT_KEYS.get(error.cl)
            or (
                a.name
                for a in getattr(error.cl, "__attrs_attrs__", ())
                if not a.name.startswith("_")
            )
        )
        # A key may be no string at all (YAML reads `1:`, `null:` or `yes:` as others).
        out.extend(
            Problem(
                _join(path, key if isinstance(key, str) else f"[{key!r}]"),
                f"unknown key {key!r}; valid keys are {', '.join(valid)}",
                "unknown_key",
            )
            for key in sorted(error.extra_fields, key=repr)
        )
    elif isinstance(error, _InputProblem | InvalidInput):
        out.extend(_own_problems(error, path))
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

    A carried file's ``content`` (or ``text``) is text; ``content_base64`` (or
    ``content`` with ``encoding: base64``) is base64. Only structure is checked
    here; call :func:`validate_plan` for the rules of a good plan.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = Problem("", f"not UTF-8 text: byte {exc.start} cannot be decoded", "encoding")
        raise InvalidPlan(f"bundle file {path.name} is not UTF-8 text", [problem]) from None
    if path.suffix.lower() == ".json":
        return from_json(text, BundlePlan)
    return structure(_yaml_loader()(text), BundlePlan, what=f"bundle file {path.name}")
