"""The core's public surface as data: one committed snapshot per adapter API minor.

    python tools/api_surface.py --write   # api/surface-<API_VERSION>.json from the core imported
    python tools/api_surface.py --check   # the same checks as tests/test_api_surface.py
    python tools/api_surface.py --print   # the surface on standard output
    python tools/api_surface.py --write --at COMMIT   # the snapshot of an earlier minor

``--write`` never replaces the snapshot of a released minor that holds another surface
(``--force`` does, for a new format of this tool): a released minor's snapshot is its record.
The minor CHANGELOG.md holds under [Unreleased] grows with each change merged on main until
its release, and its snapshot with it.

The surface is read from the imported package, not its source: the namespaces resolve their
names lazily (``_EXPORTS``), attrs makes the fields, the kit's test classes gather their tests
from mixins, and an old name lives on only through a namespace's ``__getattr__``; what a
plugin or a host sees is what Python resolves. It is every name in ``__all__`` of the public
namespaces; for a class its public methods (parameters: name, kind, required, default), whether
they are abstract, its properties, attrs fields (default, required), enum members and values,
an error's ``code``, a kit class's tests; for a function its parameters. Annotations are left
out: spelling them another way changes no caller. ``--root`` reads the core of another checkout
(``PYTHONPATH`` must put it first), which is how the snapshots of earlier minors were made.

Two comparisons: ``differences`` (anything at all changed against the current minor's
snapshot: a new snapshot, a new minor and a changelog entry are due) and ``breaks`` (what an
earlier minor of the same major had that today's core no longer gives, in a way an old caller
or an old implementation would notice), excused only by ``api/allowed-breaks.toml``.
"""

from __future__ import annotations

import argparse
import enum
import functools
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "api"
ALLOWED_BREAKS = SNAPSHOTS / "allowed-breaks.toml"
CHANGELOG = ROOT / "CHANGELOG.md"
NAMESPACES = (
    "pando_runtime",
    "pando_runtime.plugin",
    "pando_runtime.catalog",
    "pando_runtime.fleet",
    "pando_runtime.testing",
    "pando_runtime.testing.conformance",
)
_PACKAGE = "pando_runtime"
_WORD = re.compile(r"[\w.:/@+-]{0,80}")  # a name, a code, a version: not prose
_SHORT = 200  # characters of a value shown in a difference
# Classes others subclass and override without being ABCs: the kit's harness's hooks.
_OVERRIDDEN = frozenset({"pando_runtime.testing.conformance.ConformanceHarness"})
_UNSTABLE_VALUES = frozenset({"__version__"})  # moves with every release, not with the API

Surface = dict[str, Any]
Json = Any


# -- reading the surface ------------------------------------------------------------------------


def extract(probes: Mapping[str, Iterable[str]] | None = None) -> Surface:
    """The imported core's surface; ``probes`` are older names each namespace may still resolve.

    A probed name that is not in ``__all__`` but resolves (with its deprecation warning) is
    recorded under ``deprecated``: an earlier minor's name still given, so no break.
    """
    namespaces: dict[str, Json] = {}
    errors: dict[str, str] = {}
    for namespace in NAMESPACES:
        try:
            module = importlib.import_module(namespace)
        except ModuleNotFoundError as error:
            if error.name is not None and namespace.startswith(error.name):
                continue  # the namespace did not exist yet
            namespaces[namespace] = {"import_error": _error_text(error)}
            continue
        except Exception as error:  # noqa: BLE001 - an old checkout's import may fail any way
            namespaces[namespace] = {"import_error": _error_text(error)}
            continue
        public = [str(name) for name in getattr(module, "__all__", ())]
        names = {name: _describe_name(module, name) for name in public}
        deprecated: dict[str, Json] = {}
        for name in sorted(set((probes or {}).get(namespace, ())) - set(public)):
            found = _probe(module, name)
            if found is not None:
                deprecated[name] = found
        namespaces[namespace] = {"names": names, "deprecated": deprecated}
        for name, description in names.items():
            if "code" in description:
                errors[f"{namespace}.{name}"] = description["code"]
    version = str(getattr(importlib.import_module(_PACKAGE), "API_VERSION", "?"))
    return {"api_version": version, "namespaces": namespaces, "error_codes": errors}


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _probe(module: ModuleType, name: str) -> Json | None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = getattr(module, name)
        except AttributeError:
            return None
        except Exception as error:  # noqa: BLE001 - recorded, not raised
            return {"kind": "unreadable", "error": _error_text(error)}
    description = _describe(value)
    description["warning"] = next(
        (str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)), None
    )
    return description


def _describe_name(module: ModuleType, name: str) -> Json:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            value = getattr(module, name)
    except Exception as error:  # noqa: BLE001 - an old checkout may miss a dependency
        return {"kind": "unreadable", "error": _error_text(error)}
    description = _describe(value)
    if name in _UNSTABLE_VALUES:
        description.pop("value", None)
    return description


def _describe(value: Any) -> Json:
    if inspect.ismodule(value):
        return {"kind": "module"}
    if inspect.isclass(value):
        return _describe_class(value)
    if callable(value) and not _is_ours(type(value)):
        return _describe_callable(value, kind="function")
    described: dict[str, Json] = {"kind": "constant", "type": type(value).__name__}
    text = _value_text(value)
    if text is not None:
        described["value"] = text
    return described


def _is_ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] == _PACKAGE


def _describe_callable(function: Callable[..., Any], *, kind: str) -> Json:
    described: dict[str, Json] = {"kind": kind}
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        described["async"] = True
    if getattr(function, "__isabstractmethod__", False):
        described["abstract"] = True
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        described["parameters"] = None  # a builtin without a readable signature
        return described
    described["parameters"] = [_parameter(p) for p in signature.parameters.values()]
    return described


def _parameter(parameter: inspect.Parameter) -> Json:
    required = parameter.default is inspect.Parameter.empty and parameter.kind not in (
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    )
    described: dict[str, Json] = {
        "name": parameter.name,
        "kind": parameter.kind.name.lower(),
        "required": required,
    }
    if parameter.default is not inspect.Parameter.empty:
        described["default"] = _value_text(parameter.default, always=True)
    return described


def _describe_class(cls: type) -> Json:
    if not _is_ours(cls):  # a name the core passes on (anyio's streams): its origin only
        return {"kind": "class", "origin": f"{cls.__module__}.{cls.__qualname__}"}
    described: dict[str, Json] = {"kind": "class", **_class_traits(cls)}
    groups: dict[str, dict[str, Json]] = {}
    for name, member in _own_members(cls):
        if name in described.get("fields", {}) or name in described.get("members", {}):
            continue
        group, description = _classify(cls, name, member)
        groups.setdefault(group, {})[name] = description
    if not ({"fields", "protocol"} & described.keys()) and "__init__" in _defining_names(cls):
        groups.setdefault("methods", {})["__init__"] = _describe_callable(
            vars(next(k for k in cls.__mro__ if "__init__" in vars(k)))["__init__"], kind="method"
        )
    described.update({k: v for k, v in groups.items() if k in ("methods", "attributes")})
    described.update({k: sorted(v) for k, v in groups.items() if k in _NAME_GROUPS})
    return described


_NAME_GROUPS = ("properties", "fixtures", "tests")  # recorded by name only


def _class_traits(cls: type) -> dict[str, Json]:
    """What a class is, beside its members: abstract, a Protocol, fields, enum members, code."""
    traits: dict[str, Json] = {}
    if inspect.isabstract(cls):
        traits["abstract"] = True
    if getattr(cls, "_is_protocol", False):  # typing.Protocol: others implement every method
        traits["protocol"] = True
    fields = _attrs_fields(cls)
    if fields is not None:
        traits["fields"] = fields
    if issubclass(cls, enum.Enum):
        traits["members"] = {m.name: _value_text(m.value, always=True) for m in cls}
    code = getattr(cls, "code", None)
    if issubclass(cls, BaseException) and isinstance(code, str):
        traits["code"] = code
    return traits


def _classify(cls: type, name: str, member: Any) -> tuple[str, Json]:
    """The group of a class member (methods, properties, ...) and its description."""
    if name.startswith("test_"):
        return "tests", None
    if isinstance(member, property) or type(member).__name__ == "cached_property":
        return "properties", None
    if type(member).__module__.startswith("_pytest"):
        return "fixtures", None
    if isinstance(member, staticmethod | classmethod):
        kind = "staticmethod" if isinstance(member, staticmethod) else "classmethod"
        return "methods", _describe_callable(getattr(cls, name), kind=kind)
    if inspect.isfunction(member):
        return "methods", _describe_callable(member, kind="method")
    return "attributes", _attribute(member)


def _own_members(cls: type) -> Iterator[tuple[str, Any]]:
    """Public members defined by the core's classes in ``cls``'s MRO, the nearest first."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not _is_ours(klass):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or name in seen or name == "pytestmark":
                continue
            seen.add(name)
            yield name, member


def _defining_names(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ if _is_ours(klass) for name in vars(klass)}


def _attribute(member: Any) -> Json:
    if inspect.isclass(member):
        return {"class": member.__qualname__}
    text = _value_text(member)
    return {"value": text} if text is not None else {"type": type(member).__name__}


def _attrs_fields(cls: type) -> dict[str, Json] | None:
    attributes = getattr(cls, "__attrs_attrs__", None)
    if attributes is None:
        return None
    fields: dict[str, Json] = {}
    for attribute in attributes:
        if not attribute.init:
            continue
        default = attribute.default
        field: dict[str, Json] = {"required": default is _attrs_nothing()}
        if hasattr(default, "factory"):  # attrs.Factory
            field["default"] = f"factory {getattr(default.factory, '__qualname__', '?')}"
        elif default is not _attrs_nothing():
            field["default"] = _value_text(default, always=True)
        if attribute.kw_only:
            field["kw_only"] = True
        fields[attribute.alias or attribute.name] = field
    return fields


def _attrs_nothing() -> Any:
    import attrs  # noqa: PLC0415 - the core depends on attrs; this script alone does not

    return attrs.NOTHING


def _value_text(value: Any, *, always: bool = False) -> str | None:
    """A stable text for a value; ``None`` when it is prose or has none worth keeping.

    Defaults (``always``) are kept whole; a constant or class attribute that is prose (a
    remedy, a description, a script) is recorded by its type only: rewording it changes no
    program.
    """
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if inspect.isclass(value):  # by name: a move between private modules changes nobody
        return f"class {value.__qualname__}"
    if inspect.isroutine(value):
        return f"function {getattr(value, '__qualname__', '?')}"
    if isinstance(value, str) and value == _current_version():
        return "API_VERSION"  # follows the core's version: the same meaning at every minor
    if isinstance(value, str) and not always and not _WORD.fullmatch(value):
        return None
    return _data_text(value, always=always)


def _data_text(value: Any, *, always: bool) -> str | None:
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return repr(value)
    if isinstance(value, frozenset | set | tuple | list):
        items = [_value_text(v, always=True) or "?" for v in value]
        if isinstance(value, frozenset | set):
            return f"{type(value).__name__}({{{', '.join(sorted(items))}}})"
        return f"{type(value).__name__}({', '.join(items)})"
    if isinstance(value, Mapping):
        return f"{type(value).__name__} of {', '.join(sorted(map(str, value)))}"
    text = repr(value)
    if "<" in text:  # an object's default repr, or one naming a class by its module
        return type(value).__name__ if always else None
    return text


# -- snapshots ----------------------------------------------------------------------------------


def parse_version(version: str) -> tuple[int, int]:
    """``"1.6"`` as ``(1, 6)``."""
    major, _, minor = version.partition(".")
    return int(major), int(minor)


def snapshot_path(version: str, directory: Path = SNAPSHOTS) -> Path:
    """Where the snapshot of an API minor is kept."""
    return directory / f"surface-{version}.json"


def load_snapshots(directory: Path = SNAPSHOTS) -> dict[str, Surface]:
    """Every committed snapshot, by API version, oldest first."""
    found = {}
    for path in directory.glob("surface-*.json"):
        surface = json.loads(path.read_text(encoding="utf-8"))
        found[str(surface["api_version"])] = surface
    return dict(sorted(found.items(), key=lambda item: parse_version(item[0])))


def probes_from(snapshots: Mapping[str, Surface], before: str) -> dict[str, set[str]]:
    """The names minors before ``before`` gave, by namespace: what the core is asked to resolve."""
    probes: dict[str, set[str]] = {}
    for version, surface in snapshots.items():
        if parse_version(version) >= parse_version(before):
            continue
        for namespace, content in surface["namespaces"].items():
            probes.setdefault(namespace, set()).update(content.get("names", {}))
    return probes


def dumps(surface: Surface) -> str:
    """Sorted, indented JSON, so a change reads as a small diff."""
    return json.dumps(surface, indent=1, sort_keys=True) + "\n"


# -- comparing ----------------------------------------------------------------------------------


def differences(snapshot: Json, current: Json, path: str = "") -> list[str]:
    """What was added, removed or changed between two surfaces, each at its highest path."""
    if isinstance(snapshot, dict) and isinstance(current, dict):
        found: list[str] = []
        for key in sorted(snapshot.keys() | current.keys()):
            where = f"{path}.{key}" if path else str(key)
            if key not in snapshot:
                found.append(f"added {where}: {_short(current[key])}")
            elif key not in current:
                found.append(f"removed {where} (was {_short(snapshot[key])})")
            else:
                found += differences(snapshot[key], current[key], where)
        return found
    if snapshot != current:
        return [f"changed {path}: {_short(snapshot)} -> {_short(current)}"]
    return []


def _short(value: Json) -> str:
    if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
        value = [_parameter_text(v) for v in value]  # a signature, as it reads
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _parameter_text(parameter: Json) -> str:
    prefix = {"var_positional": "*", "var_keyword": "**", "keyword_only": "kw "}
    text = prefix.get(parameter["kind"], "") + parameter["name"]
    return f"{text}={parameter['default']}" if "default" in parameter else text


class Break:
    """Something an earlier minor gave that today's core does not, as an old user would see."""

    def __init__(self, path: str, rule: str, detail: str) -> None:
        self.path, self.rule, self.detail = path, rule, detail

    def __repr__(self) -> str:
        return f"{self.path}: {self.rule} ({self.detail})"


def breaks(old: Surface, new: Surface) -> list[Break]:
    """What ``new`` no longer gives of ``old`` (an earlier minor of the same major)."""
    found: list[Break] = []
    for namespace, content in old["namespaces"].items():
        if "names" not in content:
            continue  # that minor's namespace could not be read: nothing to hold it to
        today = new["namespaces"].get(namespace, {})
        given = {**today.get("deprecated", {}), **today.get("names", {})}
        for name, before in content["names"].items():
            path = f"{namespace}.{name}"
            if name not in given:
                found.append(Break(path, "removed", "names are removed only at 2.0"))
            else:
                found += _object_breaks(path, before, given[name])
    for error, code in old.get("error_codes", {}).items():
        if new.get("error_codes", {}).get(error, code) != code:
            found.append(Break(error, "code changed", f"{code} -> {new['error_codes'][error]}"))
    return found


def _object_breaks(path: str, before: Json, after: Json) -> list[Break]:
    if before.get("kind") == "unreadable" or after.get("kind") == "unreadable":
        return []
    if before.get("kind") != after.get("kind"):
        return [Break(path, "kind changed", f"{before.get('kind')} -> {after.get('kind')}")]
    if "parameters" in before:
        return _parameter_breaks(path, before, after, implemented=False)
    found = _method_breaks(path, before, after)
    for group in _NAME_GROUPS:
        gone = sorted(set(before.get(group, ())) - set(after.get(group, ())))
        found += [Break(f"{path}.{name}", "removed", f"one of its {group}") for name in gone]
    found += _field_breaks(path, before.get("fields", {}), after.get("fields", {}))
    for member, value in before.get("members", {}).items():
        now = after.get("members", {}).get(member)
        if now is None:
            found.append(Break(f"{path}.{member}", "removed", "an enum member"))
        elif now != value:
            found.append(Break(f"{path}.{member}", "value changed", f"{value} -> {now}"))
    return found


def _method_breaks(path: str, before: Json, after: Json) -> list[Break]:
    # Implemented by others (an ABC plugins subclass, a Protocol): a call hands them arguments
    implemented = bool(after.get("abstract") or after.get("protocol") or path in _OVERRIDDEN)
    old_methods, new_methods = before.get("methods", {}), after.get("methods", {})
    found: list[Break] = []
    for name, method in old_methods.items():
        now = new_methods.get(name)
        if now is None:
            found.append(Break(f"{path}.{name}", "removed", "a method of an earlier minor"))
            continue
        found += _parameter_breaks(f"{path}.{name}", method, now, implemented=implemented)
        if now.get("abstract") and not method.get("abstract"):
            found.append(Break(f"{path}.{name}", "became abstract", "old subclasses lack it"))
    if implemented:
        found += [
            Break(f"{path}.{name}", "new abstract method", "an old implementation lacks it")
            for name, method in new_methods.items()
            if name not in old_methods and (method.get("abstract") or after.get("protocol"))
        ]
    return found


def _field_breaks(path: str, before: Json, after: Json) -> list[Break]:
    found = []
    for name, field in before.items():
        now = after.get(name)
        where = f"{path}.{name}"
        if now is None:
            found.append(Break(where, "removed", "a field"))
        elif now["required"] and not field["required"]:
            found.append(Break(where, "became required", "old constructions leave it out"))
        elif field.get("default") != now.get("default"):
            old, new = field.get("default"), now.get("default")
            found.append(Break(where, "default changed", f"{old} -> {new}"))
    found += [
        Break(f"{path}.{name}", "new required field", "old constructions leave it out")
        for name, field in after.items()
        if name not in before and field["required"]
    ]
    return found


def _parameter_breaks(path: str, before: Json, after: Json, *, implemented: bool) -> list[Break]:
    old, new = before.get("parameters"), after.get("parameters")
    if old is None or new is None:
        return []
    old_by_name = {p["name"]: p for p in old}
    moved = {
        name
        for name, position in _positions(old).items()
        if _positions(new).get(name, position) != position
    }
    found: list[Break] = []
    for parameter in old:
        found += _kept_parameter_breaks(path, parameter, new, moved=parameter["name"] in moved)
    for parameter in new:
        where = f"{path}({parameter['name']})"
        if parameter["name"] in old_by_name:
            continue
        if parameter["required"]:
            found.append(Break(where, "new required parameter", "old callers lack it"))
        elif implemented:
            found.append(Break(where, "new parameter", "an old implementation would be handed it"))
    return found


def _kept_parameter_breaks(
    path: str, parameter: Json, new: list[Json], *, moved: bool
) -> list[Break]:
    """How an earlier parameter fares in the new signature."""
    where = f"{path}({parameter['name']})"
    now = next((p for p in new if p["name"] == parameter["name"]), None)
    if now is None:
        return [Break(where, "removed", "a parameter old callers pass")]
    found = []
    if now["required"] and not parameter["required"]:
        found.append(Break(where, "became required", "old callers leave it out"))
    if now["kind"] != parameter["kind"]:
        found.append(Break(where, "kind changed", f"{parameter['kind']} -> {now['kind']}"))
    elif moved:
        found.append(Break(where, "position changed", "old callers pass it by position"))
    if "default" in parameter and "default" in now and parameter["default"] != now["default"]:
        found.append(Break(where, "default changed", f"{parameter['default']} -> {now['default']}"))
    return found


def _positions(parameters: list[Json]) -> dict[str, int]:
    positional = ("positional_only", "positional_or_keyword")
    return {p["name"]: i for i, p in enumerate(q for q in parameters if q["kind"] in positional)}


def load_allowed(path: Path = ALLOWED_BREAKS) -> list[dict[str, str]]:
    """The committed allow-list: each break that was let through, with its version and reason."""
    if not path.exists():
        return []
    entries: list[dict[str, str]] = tomllib.loads(path.read_text(encoding="utf-8"))["allowed"]
    return entries


def unexcused_breaks(
    snapshots: Mapping[str, Surface], current: Surface, allowed: list[dict[str, str]]
) -> tuple[list[str], list[dict[str, str]]]:
    """Breaks against every earlier minor of the same major that no entry excuses; unused entries.

    An entry (``path``, ``rule``, and ``detail`` when it names values, as ``old -> new``)
    excuses its break against the minors before ``version``, the one that made it.
    """
    major, minor = parse_version(current["api_version"])
    used: set[int] = set()
    unexcused: dict[str, list[str]] = {}  # each break once, with the minors it is seen against
    for version, surface in snapshots.items():
        old_major, old_minor = parse_version(version)
        if old_major != major or old_minor >= minor:
            continue
        for found in breaks(surface, current):
            excuse = next((i for i, e in enumerate(allowed) if _excuses(e, found, version)), None)
            if excuse is None:
                unexcused.setdefault(repr(found), []).append(version)
            else:
                used.add(excuse)
    return (
        [f"{text} (against {', '.join(versions)})" for text, versions in unexcused.items()],
        [entry for i, entry in enumerate(allowed) if i not in used],
    )


def _excuses(entry: Mapping[str, str], found: Break, version: str) -> bool:
    return (
        entry["path"] == found.path
        and entry["rule"] == found.rule
        and entry.get("detail", found.detail) == found.detail
        and parse_version(version) < parse_version(entry["version"])
    )


def _unreleased(version: str) -> bool:
    """Whether ``version`` is the minor CHANGELOG.md holds under [Unreleased]: it may still grow.

    Its number was given on main when its first change merged; later merges before its release
    add to it, and its snapshot with them. A released minor's snapshot never changes.
    """
    heading = re.search(
        r"^## \[Unreleased\].*$", CHANGELOG.read_text(encoding="utf-8"), re.MULTILINE
    )
    return (
        heading is not None
        and re.search(rf"\bAPI {re.escape(version)}(?![.\d])", heading.group(0)) is not None
    )


def changelog_section(version: str, text: str) -> str | None:
    """The changelog's section of adapter API ``version`` (its heading on), or ``None``."""
    heading = re.search(
        rf"^(#+) .*\bAPI {re.escape(version)}(?![.\d]).*$", text, flags=re.MULTILINE
    )
    if heading is None:
        return None
    level = len(heading.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", flags=re.MULTILINE).search(text, heading.end())
    return text[heading.start() : end.start() if end else len(text)]


def _says_what_a_plugin_must_do(section: str) -> bool:
    prose = re.sub(r"<!--.*?-->", "", section, flags=re.DOTALL)  # a placeholder is no answer
    return re.search(r"What a plugin must do:?\**\s*\S", prose) is not None


def snapshot_problems(snapshots: Mapping[str, Surface], current: Surface) -> list[str]:
    """Check 1: the surface is the snapshot of its API minor."""
    version = current["api_version"]
    if version not in snapshots:
        return [
            (
                f"no snapshot of adapter API {version}: write it (python tools/api_surface.py "
                f"--write) and add the API {version} section to CHANGELOG.md"
            )
        ]
    changed = differences(snapshots[version], current)
    if not changed:
        return []
    return [
        f"the public surface differs from api/surface-{version}.json, the snapshot of adapter "
        f"API {version}:\n  "
        + "\n  ".join(changed)
        + "\nA change of the public surface is a new adapter API minor: bump API_VERSION "
        "(pando_runtime/_contract/_version.py; numbers are given on main), add its section to "
        "CHANGELOG.md (what was added, what a plugin must do), and write its snapshot: "
        "python tools/api_surface.py --write"
    ]


def break_problems(
    snapshots: Mapping[str, Surface], current: Surface, allowed: list[dict[str, str]]
) -> list[str]:
    """Check 2: nothing an earlier minor of the major gave is gone, unless the allow-list says."""
    unexcused, unused = unexcused_breaks(snapshots, current, allowed)
    found = []
    if unexcused:
        found.append(
            "what an earlier minor gave is gone or changed (names are removed only at 2.0; an "
            "existing method gains no parameter an old implementation would be handed; a "
            "default keeps its value):\n  "
            + "\n  ".join(unexcused)
            + "\nGive it back, or, when it cannot be, say why in api/allowed-breaks.toml"
        )
    if unused:
        found.append(
            "entries of api/allowed-breaks.toml excuse nothing any more (remove them): "
            + ", ".join(f"{e['path']} {e['rule']}" for e in unused)
        )
    return found


def changelog_problems(versions: Iterable[str], changelog: Path = CHANGELOG) -> list[str]:
    """Check 3: each minor has its changelog section, saying what a plugin must do."""
    text = changelog.read_text(encoding="utf-8")
    found = []
    for version in versions:
        section = changelog_section(version, text)
        if section is None:
            found.append(f"CHANGELOG.md has no heading for adapter API {version}")
        elif not _says_what_a_plugin_must_do(section):
            found.append(
                f"CHANGELOG.md's section of adapter API {version} does not say what a plugin "
                "must do ('**What a plugin must do:** ...', often: nothing)"
            )
    return found


def problems() -> list[str]:
    """Everything ``--check`` and the test fail on, as messages; empty when all holds."""
    snapshots = load_snapshots()
    current = extract(probes_from(snapshots, before=_current_version()))
    return [
        *snapshot_problems(snapshots, current),
        *break_problems(snapshots, current, load_allowed()),
        *changelog_problems({*snapshots, current["api_version"]}),
    ]


# -- command line -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Write, check or print the surface of the core imported."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="write the current minor's snapshot")
    action.add_argument("--check", action="store_true", help="fail on what the test fails on")
    action.add_argument("--print", action="store_true", help="print the surface")
    parser.add_argument("--root", type=Path, help="the checkout whose core must be the one read")
    parser.add_argument("--output", type=Path, help="where --write writes (a file)")
    parser.add_argument("--source", help="a note kept in the snapshot (a commit, a date)")
    parser.add_argument("--at", metavar="COMMIT", help="read the core of a commit of history")
    parser.add_argument(
        "--force", action="store_true", help="replace a snapshot that differs (a new format)"
    )
    arguments = parser.parse_args(argv)
    if arguments.at is not None:
        return _at_commit(arguments.at, argv if argv is not None else sys.argv[1:])
    if arguments.root is not None:
        module = importlib.import_module(_PACKAGE)
        read = Path(str(module.__file__)).resolve()
        if not read.is_relative_to(arguments.root.resolve()):
            parser.error(f"{_PACKAGE} imported from {read}, not from --root; set PYTHONPATH")
    if arguments.check:
        found = problems()
        print("\n\n".join(found) if found else "the public surface holds")
        return 1 if found else 0
    snapshots = load_snapshots()
    surface = extract(probes_from(snapshots, before=_current_version()))
    if arguments.source:
        surface["source"] = arguments.source
    if arguments.print:
        sys.stdout.write(dumps(surface))
        return 0
    path = arguments.output or snapshot_path(surface["api_version"])
    changed = path.exists() and path.read_text(encoding="utf-8") != dumps(surface)
    if changed and not arguments.force and not _unreleased(surface["api_version"]):
        # A released minor's snapshot is its record: a change of the surface is a new minor.
        print(
            f"{path} holds another surface of adapter API {surface['api_version']}, a released "
            "minor: a change of the surface is a new minor (bump API_VERSION, then --write); "
            "--force replaces it when this tool's format changed"
        )
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(surface), encoding="utf-8")
    print(f"wrote {path}")
    return 0


def _at_commit(commit: str, argv: list[str]) -> int:
    """Run this script on the core of ``commit``, checked out in a temporary worktree.

    The script stays this one (it copes with the old layouts: it reads only the public
    namespaces); the snapshots written go to this checkout's ``api/``.
    """
    rest = [a for i, a in enumerate(argv) if a != "--at" and (i == 0 or argv[i - 1] != "--at")]
    with tempfile.TemporaryDirectory() as directory:
        tree = Path(directory) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
        try:
            date = subprocess.run(
                [*git, "show", "-s", "--format=%H %cd", "--date=short", commit],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            source = ["--source", f"commit {date[0]} ({date[1]})"]
            return subprocess.run(
                [sys.executable, "-W", "ignore", __file__, *rest, "--root", str(tree), *source],
                check=False,
                cwd=directory,  # not this checkout: its core must not be the one imported
                env={**os.environ, "PYTHONPATH": str(tree)},
            ).returncode
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)


@functools.cache
def _current_version() -> str:
    return str(importlib.import_module(_PACKAGE).API_VERSION)


if __name__ == "__main__":
    sys.exit(main())
