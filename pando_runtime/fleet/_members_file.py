"""A fleet's members from a file re-read on change (``members_file``), beside its settings.

The file holds ``members`` as the settings do (YAML or JSON: each member's adapter, settings and
``place_new_apps``). It is read once the fleet is entered, then again whenever its content
changes (its SHA-256, checked every ``members_file_poll`` seconds): a member added joins, one
whose entry changed is replaced make-before-break (new settings, a rotated credential), one
removed leaves (:mod:`._live`). A file that cannot be read or whose entries are not valid is
refused as a whole (a log record and a ``FLEET_CHANGED`` event naming each problem's path) and
the members stay as they were, until it changes again. The members of ``members`` (settings)
stay for the fleet's life; a name of theirs in the file is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
import attrs
from anyio.abc import TaskStatus

from .._adapter._abc import RuntimeAdapter
from .._adapter._registry import load_adapter
from .._contract._errors import (
    AdapterNotInstalled,
    IncompatibleAdapter,
    InvalidConfig,
    Problem,
    UnknownAdapter,
)
from .._input._config import structure_config
from .._util._log import logger
from ._info import FleetConfig, MemberConfig
from ._live import MemberChanges
from ._members import ConfiguredMembers, FleetMembers, _relocated

__all__ = ["MembersFile"]

log = logger("fleet")


@attrs.frozen(kw_only=True)
class _FileMembers:
    """What a members file holds."""

    members: dict[str, MemberConfig] = attrs.field(factory=dict)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _parsed(data: bytes) -> dict[str, MemberConfig]:
    """The file's members (:class:`InvalidConfig` with each problem's path)."""
    import yaml  # noqa: PLC0415 - a dependency of the core, loaded when a file is read

    try:
        doc = yaml.safe_load(data) if data.strip() else {}
    except yaml.YAMLError:
        raise InvalidConfig("the members file is not YAML or JSON") from None
    parsed: _FileMembers = structure_config(_FileMembers, doc, what="members file")
    return parsed.members


def _fingerprint(member: MemberConfig) -> str:
    entry = attrs.asdict(member)
    return hashlib.sha256(json.dumps(entry, sort_keys=True, default=str).encode()).hexdigest()


class MembersFile:
    """The members of the settings, and those of a file followed while the fleet runs."""

    def __init__(
        self, config: FleetConfig, *, load: Callable[..., RuntimeAdapter] = load_adapter
    ) -> None:
        assert config.members_file is not None  # noqa: S101 - the fleet makes it only then
        self.configured = ConfiguredMembers(config, load=load).members
        self.path = Path(config.members_file).expanduser()
        self.poll = config.members_file_poll
        self._load = load
        self._file_sha: str | None = None
        self.taken: dict[str, str] = {}
        """The file's members now, by name: their entry's fingerprint."""

    async def open(self) -> FleetMembers:
        """The settings' members (the file's join once the fleet is entered)."""
        return self.configured

    async def follow(
        self, changes: MemberChanges, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the file, join its members, then follow its changes."""
        await self._sync(changes)
        task_status.started()
        while True:
            await anyio.sleep(self.poll)
            await self._sync(changes)

    async def _sync(self, changes: MemberChanges) -> None:
        data = await anyio.to_thread.run_sync(_read, self.path)
        sha = hashlib.sha256(data).hexdigest() if data is not None else "absent"
        if sha == self._file_sha:
            return
        self._file_sha = sha
        try:
            wanted = _parsed(data or b"")
        except InvalidConfig as error:
            where = "; ".join(f"{p.path}: {p.message}" for p in error.problems) or error.message
            changes.refuse(str(self.path), f"the members file is not valid ({where})")
            return
        for name in [n for n in self.taken if n not in wanted]:
            del self.taken[name]
            await changes.leave(name)
        async with anyio.create_task_group() as group:  # one member never holds up another
            for name, member in wanted.items():
                if self.taken.get(name) != _fingerprint(member):
                    group.start_soon(self._take, changes, name, member)

    async def _take(self, changes: MemberChanges, name: str, member: MemberConfig) -> None:
        where = f"{self.path}: members[{name!r}]"
        if name in self.configured.adapters:
            changes.refuse(name, f"{where}: a member of the settings has that name")
            return
        try:
            adapter = self._made(name, member)
        except InvalidConfig as error:
            problems = "; ".join(f"{p.path}: {p.message}" for p in error.problems)
            changes.refuse(name, f"{where}: {problems or error.message}")
            return
        replacing = name in self.taken
        self.taken[name] = _fingerprint(member)
        if replacing:
            await changes.replace(name, adapter)
        else:
            await changes.join(name, adapter, place_new_apps=member.place_new_apps)

    def _made(self, name: str, member: MemberConfig) -> RuntimeAdapter:
        """The member's adapter, checked as a member of the settings is (no I/O)."""
        where = f"members[{name!r}]"
        if member.adapter == "fleet":
            raise InvalidConfig(
                "a fleet is not a member of a fleet",
                [Problem(f"{where}.adapter", "a fleet is not a member of a fleet", "invalid")],
            )
        try:
            return self._load(member.adapter, member.settings)
        except InvalidConfig as error:
            problems = _relocated(error, f"{where}.settings")
            raise InvalidConfig(error.message, problems, remedy=error.remedy) from None
        except (UnknownAdapter, AdapterNotInstalled, IncompatibleAdapter) as error:
            problem = Problem(f"{where}.adapter", error.message, "unknown")
            raise InvalidConfig(error.message, [problem], remedy=error.remedy) from None
