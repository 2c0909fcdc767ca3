"""Interception points of the tool-call path, and the verdicts they give.

Every call passes the session's interceptors in order before it runs (each may allow, deny, ask a
person, or replace the input) and after it ran (each may replace the result). A model answer that
would end the task is a completion candidate (an interceptor may ask for another turn with a
reason). A submitted prompt may be blocked or given added context; compaction and session start
and end are announced to all of them. Approvals are an interceptor;
lifecycle hooks plug in the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

if TYPE_CHECKING:
    from .events import SessionEnd, SessionStart
    from .tools.base import Tool, ToolOutcome


# The read-only built-in tools the approval policies trust by name.
TRUSTED_READ_ONLY = ("read_file", "find_files", "grep", "list_directory", "tree")


@dataclass
class PendingCall:
    """A tool call on its way to its tool: what interceptors see and may change."""

    id: str
    name: str
    arguments: Mapping[str, Any]
    tool: Tool | None  # None for a name the catalogue does not have
    turn: int
    cwd: str
    workspace: str
    # What interceptors added for the model beside the result (Verdict.context), in order.
    context: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    """What an interceptor says about a call before it runs. `arguments` replaces the input."""

    action: Literal["allow", "deny", "ask", "continue"] = "continue"
    reason: str = ""
    source: str = ""
    arguments: Mapping[str, Any] | None = None
    # The error category a denial reports (e.g. "hardline"); "denied" when empty.
    category: str = ""
    # Text for the model beside the call's result (a hook's additional context), whatever the action.
    context: str = ""

    @classmethod
    def allow(cls, source: str, reason: str = "") -> Verdict:
        return cls("allow", reason, source)

    @classmethod
    def deny(cls, source: str, reason: str, category: str = "denied") -> Verdict:
        return cls("deny", reason, source, category=category)

    @classmethod
    def ask(cls, source: str, reason: str) -> Verdict:
        return cls("ask", reason, source)

    @classmethod
    def replace(cls, source: str, arguments: Mapping[str, Any]) -> Verdict:
        return cls("continue", "", source, arguments=arguments)


@dataclass(frozen=True)
class Continuation:
    """Ask the model for another turn instead of ending the task; the reason is sent as a user message."""

    reason: str
    source: str = ""


@dataclass(frozen=True)
class PromptSubmission:
    """A prompt about to start a task (the person's, or a front end's)."""

    text: str
    session_id: str


@dataclass(frozen=True)
class PromptVerdict:
    """What an interceptor says about a prompt: `block` it (the task ends without asking the
    model, with `reason`), and/or add `context` for the model after it."""

    block: bool = False
    reason: str = ""
    context: str = ""
    source: str = ""


@dataclass
class CompletionCandidate:
    turn: int
    text: str
    session_id: str


class Order(IntEnum):
    """Where an interceptor stands in the chain, lowest first. Each kind declares its place; the
    order interceptors were added in only breaks ties."""

    FLOOR = 0  # the hardline floor: nothing runs before it
    STALLS = 100  # the stall detectors see every call, even one a hook would deny
    HOOKS = 200  # lifecycle hooks
    DEFAULT = 500  # a front end's or a tool source's own interceptors
    ADJUDICATOR = 800  # finalization: completion candidates, after the hooks' Stop
    OUTPUT_SCHEMA = 850  # the final answer's shape, last before approvals
    APPROVALS = 1000  # the approval policy decides last, on the input as the others left it


class Interceptor:
    """Base class: every point is a no-op, so an interceptor overrides only what it uses."""

    name = "interceptor"
    order: ClassVar[int] = Order.DEFAULT
    # Judges the model's own conduct (the stall detectors): a call the person ran themselves from a
    # front end (`/diff`) does not pass it.
    model_only: ClassVar[bool] = False

    def begin_batch(self, turn: int) -> None:
        """The calls of one model turn are about to be decided."""

    def end_batch(self, turn: int) -> None:
        """The calls of one model turn have all ended (or the batch was cancelled)."""

    async def before_call(self, call: PendingCall) -> Verdict | None:
        return None

    async def after_call(self, call: PendingCall, outcome: ToolOutcome) -> ToolOutcome | None:
        return None

    async def completion_candidate(self, candidate: CompletionCandidate) -> Continuation | None:
        return None

    async def prompt_submitted(self, prompt: PromptSubmission) -> PromptVerdict | None:
        """Before a prompt starts a task (the first interceptor that blocks it wins)."""
        return None

    async def before_compaction(self, reason: Literal["manual", "auto"], messages: int) -> None:
        """The conversation (`messages` long) is about to be compacted; observation only."""
        return None

    async def session_start(self, event: SessionStart) -> None:
        return None

    async def session_end(self, event: SessionEnd) -> None:
        return None


_I = TypeVar("_I", bound=Interceptor)


class InterceptorChain:
    """A session's interceptors in their declared order (`Interceptor.order`, then the order they
    were added in). Adding or removing one never depends on where the others are."""

    def __init__(self, interceptors: Iterable[Interceptor] = ()) -> None:
        self._count = itertools.count()
        self._items: list[tuple[int, int, Interceptor]] = []
        for interceptor in interceptors:
            self.add(interceptor)

    def add(self, interceptor: Interceptor) -> None:
        self._items.append((int(interceptor.order), next(self._count), interceptor))
        self._items.sort(key=lambda item: item[:2])

    def remove(self, interceptor: Interceptor) -> None:
        """Take `interceptor` out; nothing happens when it is not in the chain."""
        self._items = [item for item in self._items if item[2] is not interceptor]

    def of_type(self, kind: type[_I]) -> list[_I]:
        return [item for _, _, item in self._items if isinstance(item, kind)]

    def __iter__(self) -> Iterator[Interceptor]:
        return iter([item for _, _, item in self._items])

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, interceptor: object) -> bool:
        return any(item is interceptor for _, _, item in self._items)

    def __repr__(self) -> str:
        return f"InterceptorChain({[item.name for _, _, item in self._items]})"


def in_order(interceptors: Iterable[Interceptor]) -> list[Interceptor]:
    """`interceptors` sorted by their declared order (stable)."""
    return sorted(interceptors, key=lambda interceptor: int(interceptor.order))
