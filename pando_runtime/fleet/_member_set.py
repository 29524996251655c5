"""A fleet's members as one object: made once, asked all at once, a silent one named.

Every question has a deadline (``answer_deadline``): a member that has not answered by then
is silent for that decision, as one whose runtime refuses at once. A member that hangs (its
connections open, nothing answering) holds up no decision for longer than the deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, TypeVar

import anyio
import attrs

from .._adapter._abc import RuntimeAdapter
from .._contract._capabilities import RuntimeCapabilities
from .._contract._errors import AdapterUnavailable
from ._members import FleetMembers, MemberSource, naming

__all__ = ["Answers", "MemberChange", "MemberSet"]

T = TypeVar("T")


@attrs.frozen
class Answers(Generic[T]):
    """Each member's answer to one question (in the members' order), and the silent ones."""

    by_member: dict[str, T]
    silent: list[AdapterUnavailable]


@attrs.frozen
class MemberChange:
    """A member ``joined``, was ``replaced``, ``left``, or was ``refused`` (``reason``: why)."""

    change: str
    name: str
    reason: str = ""
    handovers: list[anyio.Event] = attrs.field(factory=list, eq=False, repr=False)
    """``replaced``: what each listener that still follows the old adapter sets once it no
    longer needs it (the old one is closed then, or after ``join_wait``)."""


class MemberSet:
    """The members a source makes, made on first use; ``noun`` names one in errors.

    Members made already (a :class:`FleetMembers`) are there at once, before any I/O.
    ``deadline``: the seconds a member has to answer a question, read at each question (the
    fleet's settings may change after it is made); ``None``: no deadline.
    """

    def __init__(
        self,
        source: MemberSource,
        noun: str,
        deadline: Callable[[], float | None] = lambda: None,
    ) -> None:
        self._source = source
        self._deadline = deadline
        self._made = source if isinstance(source, FleetMembers) else None
        self._opening = anyio.Lock()
        self.noun = noun
        self._capabilities: dict[str, RuntimeCapabilities] = {}
        self._not_started: dict[str, AdapterUnavailable] = {}
        """Members that could not start (their runtime silent then): why, by name."""
        self._departed: dict[str, AdapterUnavailable] = {}
        """The bundles of members that left: why each is unavailable, by bundle id."""
        self._listeners: list[Callable[[MemberChange], None]] = []

    async def fleet(self) -> FleetMembers:
        """The members, made on first use."""
        if self._made is None:
            async with self._opening:
                if self._made is None:
                    self._made = await self._source.open()
        return self._made

    @property
    def made(self) -> FleetMembers | None:
        """The members if made already (no I/O)."""
        return self._made

    @property
    def adapters(self) -> Mapping[str, RuntimeAdapter]:
        """The member adapters by name (empty until made)."""
        return dict(self._made.adapters) if self._made else {}

    def not_started(self, name: str, error: AdapterUnavailable) -> None:
        """Member ``name`` could not start: every question to it is ``error`` until it does."""
        self._not_started[name] = self.named(error, name)

    def started(self, name: str) -> None:
        """Member ``name`` started: it is asked again."""
        self._not_started.pop(name, None)

    # -- live changes (:mod:`._live`) --------------------------------------------------------

    def _evolve(self, adapters: dict[str, RuntimeAdapter], closed: frozenset[str]) -> None:
        made = self._made
        assert made is not None  # noqa: S101 - a live fleet made its members first
        self._made = attrs.evolve(made, adapters=adapters, closed=closed)

    def _closed(self) -> frozenset[str]:
        return self._made.closed if self._made is not None else frozenset()

    def add(self, name: str, adapter: RuntimeAdapter, *, closed: bool = False) -> None:
        """Member ``name`` joins (started already, or said not started); ``closed``: no new app."""
        shut = self._closed() | {name} if closed else self._closed() - {name}
        self._evolve({**self.adapters, name: adapter}, shut)
        # Back again: its apps are asked of it, not said unavailable.
        self._departed = {b: e for b, e in self._departed.items() if self.name_of(e) != name}

    def replace(self, name: str, adapter: RuntimeAdapter) -> None:
        """Member ``name`` is ``adapter`` from now on (started already)."""
        self._evolve({**self.adapters, name: adapter}, self._closed())
        self._not_started.pop(name, None)

    def remove(self, name: str, bundles: set[str]) -> None:
        """Member ``name`` leaves; each of ``bundles`` is unavailable, naming it, from now on."""
        self._evolve({n: a for n, a in self.adapters.items() if n != name}, self._closed() - {name})
        self._not_started.pop(name, None)
        self._capabilities.pop(name, None)
        gone = self.named(
            AdapterUnavailable(
                f"it left the fleet; the {self.noun}'s apps are not reachable from here",
                remedy=f"Bring the {self.noun} back, or deploy the bundle again elsewhere "
                "(first_deploy=True).",
            ),
            name,
        )
        self._departed.update(dict.fromkeys(bundles, gone))

    def departed(self, bundle_id: str) -> AdapterUnavailable | None:
        """Why ``bundle_id`` is unavailable: its member left (``None``: it did not)."""
        return self._departed.get(bundle_id)

    def settled(self, bundle_id: str) -> None:
        """``bundle_id`` was written to a member: whatever left with another is not it."""
        self._departed.pop(bundle_id, None)

    def watch(self, listener: Callable[[MemberChange], None]) -> Callable[[], None]:
        """Call ``listener`` with every change from now on; returns what stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def announce(self, change: MemberChange) -> None:
        """Tell every listener of ``change``."""
        for listener in list(self._listeners):
            listener(change)

    async def member(self, name: str) -> RuntimeAdapter:
        """Member ``name``, or :class:`AdapterUnavailable` naming it while it cannot start."""
        adapters = (await self.fleet()).adapters
        if name not in adapters:
            raise self.named(
                AdapterUnavailable(
                    "it is not a member of the fleet (any more)",
                    remedy=f"Deploy the bundle again on a {self.noun} of the fleet.",
                ),
                name,
            )
        adapter = adapters[name]
        if name in self._not_started:
            raise self._not_started[name]
        return adapter

    def named(self, error: AdapterUnavailable, name: str) -> AdapterUnavailable:
        """``error`` naming member ``name``."""
        return naming(error, name, self.noun)

    def name_of(self, error: AdapterUnavailable) -> str:
        """The member a :meth:`named` error names."""
        return str(error.details[self.noun])

    async def ask(
        self, ask: Callable[[str, RuntimeAdapter], Awaitable[T]], names: list[str] | None = None
    ) -> Answers[T]:
        """``ask`` every member (or those ``names``) at once; a silent one is named, not fatal."""
        adapters = (await self.fleet()).adapters
        answers: dict[str, T] = {}
        silent: list[AdapterUnavailable] = []

        async def one(name: str) -> None:
            try:
                answers[name] = await self.in_time(name, ask(name, await self.member(name)))
            except AdapterUnavailable as error:
                silent.append(self.named(error, name))

        async with anyio.create_task_group() as group:
            for name in names if names is not None else adapters:
                group.start_soon(one, name)
        order = list(adapters)
        rank = {n: i for i, n in enumerate(order)}  # a member that left meanwhile: last
        silent.sort(key=lambda e: rank.get(self.name_of(e), len(rank)))
        return Answers({n: answers[n] for n in order if n in answers}, silent)

    async def in_time(self, name: str, question: Awaitable[T]) -> T:
        """Member ``name``'s answer to ``question``; past the deadline, it is silent (named)."""
        deadline = self._deadline()
        if deadline is None:
            return await question
        with anyio.move_on_after(deadline):
            return await question
        raise self.named(
            AdapterUnavailable(
                f"it did not answer within {deadline:g} s",
                remedy=f"The {self.noun}'s runtime may be hung or cut off: check it. It counts "
                "as silent until it answers in time (answer_deadline sets the wait).",
                details={"cause": "deadline", "deadline": deadline},
            ),
            name,
        )

    async def all_answer(self, ask: Callable[[str, RuntimeAdapter], Awaitable[T]]) -> dict[str, T]:
        """``ask`` every member; the first silent one raises (named)."""
        answers = await self.ask(ask)
        if answers.silent:
            raise answers.silent[0]
        return answers.by_member

    async def capabilities(self) -> dict[str, RuntimeCapabilities]:
        """Each member's capabilities (:meth:`capabilities_of`), in the members' order.

        A member that never answered yet is left out; :class:`AdapterUnavailable` (naming the
        first silent member) when none ever did.
        """
        adapters = (await self.fleet()).adapters
        answers = await self.ask(self.capabilities_of)
        each = {n: self._capabilities[n] for n in adapters if n in self._capabilities}
        if not each:
            raise answers.silent[0]
        return each

    async def capabilities_of(self, name: str, member: RuntimeAdapter) -> RuntimeCapabilities:
        """A member's capabilities, asked each time; its last answer while it is silent.

        Not its first answer for good: a member's may grow (a Kubernetes cluster's restricted
        egress once its canary could run, its usage once the metrics API answered).
        """
        try:
            self._capabilities[name] = await member.capabilities()
        except AdapterUnavailable:
            if name not in self._capabilities:
                raise
        return self._capabilities[name]
