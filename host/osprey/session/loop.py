"""The agent loop: model turn, tool calls, results, until the model answers without tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from ..config import RetrySettings
from ..errors import ProviderError
from ..events import AssistantText, Compaction, Event, Notice, UsageEvent, UserMessageEvent
from ..interception import CompletionCandidate, Continuation, Interceptor
from ..messages import AssistantMessage, Message, ModelRequest, ToolSpec, Usage, UserMessage, compacted
from ..numbers import counted
from ..outcomes import Outcome
from ..providers.base import Provider, TextSink
from ..providers.turns import TurnTimeout, run_turn
from .calls import CallPath
from .output_schema import StructuredOutputExhausted

COMPACT_SYSTEM = """\
You summarise a coding agent's conversation so the agent can go on working from the summary alone.
Write a compact, complete briefing: the user's requests and constraints; what was done (files read,
changed and created, with paths; commands run and their outcomes); the current state, including
anything failing and why; decisions made and why; what remains to do, in order. Keep exact paths,
names, commands and error messages. Write it as notes to yourself; no preamble."""
COMPACT_REQUEST = "Summarise the conversation so far as your instructions say."
CONTINUE_AFTER_COMPACTION = "Continue the task from where the summary leaves off."
# Auto compaction starts when the last model turn used this share of the context window.
AUTO_COMPACT_AT = 0.8

EMPTY_COMPLETIONS_TOLERATED = 2
ACTIONLESS_TIMEOUTS = 2
EMPTY_CORRECTION = "Your last reply was empty. Continue the task: call a tool, or give your final answer as text."
# A task with a terminal tool ends only with a valid call of it: an answer in text (or a
# task_status declaration) is answered with a reminder, at most this many times per task.
TERMINAL_REMINDERS = 3


def terminal_reminder(tool: str) -> str:
    return (f"This task ends only when you call {tool} with a result that validates against its schema. "
            f"Do not answer in text: call {tool} now (fix the problems its last result named, if any).")


@dataclass
class TaskResult:
    outcome: Outcome
    turns: int
    final_text: str = ""
    error: str | None = None


@dataclass
class AgentLoop:
    """Drives a conversation: each `run_task(prompt)` works one prompt to an outcome.

    The system prompt and tool specs are asked for at every turn boundary, so the session can
    change them between turns. Cancelling `run_task` leaves the conversation valid for the next
    prompt: every tool call the model made has a result."""

    provider: Provider
    calls: CallPath
    system: Callable[[], str]
    specs: Callable[[], list[ToolSpec]]
    emit: Callable[[Event], None]
    retry: RetrySettings = field(default_factory=RetrySettings)
    max_turns: int = 150
    on_text: TextSink | None = None
    session_id: str = ""
    # Interceptors asked at each completion candidate (they may ask for another turn).
    interceptors: Iterable[Interceptor] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    # Set when the session asked the task to stop; checked at every step, so a stop that lands as
    # a step finishes is not lost.
    stopping: bool = False
    # The model's context window in tokens (None: unknown, so no automatic compaction).
    context_window: int | None = None
    # Where `context_window` comes from when it is looked up only at its first need (the model
    # catalog's cache, which a session that never reaches a second turn does not read); it
    # replaces `context_window` then.
    context_window_of: Callable[[], int | None] | None = None
    # Called at each turn boundary, before the request is built (a pending extension reload).
    before_turn: Callable[[], None] | None = None
    # A note kept across compaction (the verification checkpoint's), appended to the summary.
    compaction_note: Callable[[], str] | None = None
    _last_input_tokens: int = field(default=0, init=False)
    # (status, summary) of a `task_status` call in the batch being run: a completion candidate.
    _declared: tuple[str, str] | None = field(default=None, init=False)
    # The persona's terminal tool (`submit_plan`): the task ends only with a valid call of it, as
    # TerminalToolSucceeded (its JSON the final text), or TerminalToolFailed.
    terminal_tool: str | None = None
    _submitted: list[object] = field(default_factory=list, init=False)

    def submit(self, value: object) -> None:
        """The terminal tool was called with a valid result: once the calls of this turn have run,
        that is a completion candidate."""
        self._submitted.append(value)

    def declare(self, status: str, summary: str) -> None:
        """The model declared the task done or blocked (`task_status`): once the calls of this turn
        have run, that is a completion candidate."""
        self._declared = (status, summary)

    def add_user_message(self, text: str, origin: str = "user") -> None:
        self.messages.append(UserMessage(content=text))
        self.emit(UserMessageEvent(text=text, origin=origin))

    async def run_task(self) -> TaskResult:
        """Work the conversation (its last message is the new prompt) to an outcome; CancelledError
        propagates after the conversation is made whole."""
        first = self.turns
        outcome, final, error = await self._drive()
        return TaskResult(outcome, self.turns - first, final, error)

    async def _drive(self) -> tuple[Outcome, str, str | None]:
        empty_streak = 0
        timeout_streak = 0
        task_turns = 0
        reminders = 0
        while True:
            self._check_stop()
            if self._near_the_limit():
                await self.compact("auto")
                self.add_user_message(CONTINUE_AFTER_COMPACTION, origin="loop")
            if task_turns >= self.max_turns:
                return Outcome.MAX_CONTINUATIONS, "", f"the model was still working after {counted(self.max_turns, 'turn')} (--max-turns)"
            task_turns += 1
            self.turns += 1
            turn_no = self.turns
            if self.before_turn is not None:
                self.before_turn()
            # Built without validation: every part is already a validated model, and validating the
            # whole conversation again each turn costs time that grows with the conversation.
            request = ModelRequest.model_construct(system=self.system(), messages=list(self.messages), tools=self.specs())
            try:
                turn = await run_turn(self.provider, request, self.retry, self.on_text, self._notice)
            except TurnTimeout as exc:
                timeout_streak += 1
                if timeout_streak >= ACTIONLESS_TIMEOUTS:
                    return Outcome.ACTIONLESS_TIMEOUT, "", f"{exc}, {timeout_streak} turns in a row"
                self._notice(f"{exc}; asking again")
                continue
            except ProviderError as exc:
                return Outcome.ERROR, "", str(exc)
            timeout_streak = 0
            self._last_input_tokens = turn.usage.input_tokens + turn.usage.output_tokens
            self.usage = self.usage + turn.usage
            self.emit(UsageEvent(turn=turn_no, usage=turn.usage, total=self.usage))
            message = turn.message
            if not message.text.strip() and not message.tool_calls:
                empty_streak += 1
                if empty_streak > EMPTY_COMPLETIONS_TOLERATED:
                    return Outcome.ERROR, "", f"the model returned {empty_streak} empty replies in a row"
                self._notice("the model returned an empty reply; asking it to continue")
                self.add_user_message(EMPTY_CORRECTION, origin="loop")
                continue
            empty_streak = 0
            if message.text or message.reasoning:
                self.emit(AssistantText(turn=turn_no, text=message.text, reasoning=message.reasoning))
            self.messages.append(message)
            submitted: list[object] = []
            if message.tool_calls:
                self._check_stop(message)
                self._declared = None
                self._submitted = []
                await self.calls.run_batch(turn_no, message.tool_calls, self.messages)
                declared, self._declared = self._declared, None
                submitted, self._submitted = self._submitted, []
                if declared is None and not submitted:
                    continue
                final = declared[1] if declared is not None and declared[0] == "done" else f"blocked: {declared[1]}" if declared else ""
                candidate_text = final
            else:
                candidate_text = final = message.text
            if self.terminal_tool is not None:
                if not submitted:  # text, or task_status: not this task's ending
                    reminders += 1
                    if reminders > TERMINAL_REMINDERS:
                        return (Outcome.TERMINAL_TOOL_FAILED, "",
                                f"the model did not call {self.terminal_tool} with a valid result after {counted(TERMINAL_REMINDERS, 'reminder')}")
                    self._notice(f"reminding the model to end the task with {self.terminal_tool}")
                    self.add_user_message(terminal_reminder(self.terminal_tool), origin="loop")
                    continue
                candidate_text = final = json.dumps(submitted[-1], ensure_ascii=False)
            try:
                continuation = await self._completion(turn_no, candidate_text)
            except StructuredOutputExhausted as exc:
                return Outcome.ERROR, "", str(exc)
            if continuation is None:
                return (Outcome.TERMINAL_TOOL_SUCCEEDED if submitted else Outcome.COMPLETED), final, None
            self._notice(f"{continuation.source or 'an interceptor'} asked for another turn: {continuation.reason}")
            self.add_user_message(continuation.reason, origin="loop")

    def _near_the_limit(self) -> bool:
        if len(self.messages) <= 2 or self._last_input_tokens <= 0:
            return False
        window = self.window()
        return window is not None and window > 0 and self._last_input_tokens >= AUTO_COMPACT_AT * window

    def window(self) -> int | None:
        """The context window, looked up now if it was left to its first need."""
        if self.context_window_of is not None:
            self.context_window, self.context_window_of = self.context_window_of(), None
        return self.context_window

    async def compact(self, reason: Literal["manual", "auto"] = "manual", instructions: str = "") -> Compaction:
        """Replace the conversation with a summary the model writes; one model turn, no tools.
        Raises TurnTimeout or ProviderError when the model cannot write it (the conversation is
        then unchanged)."""
        for interceptor in self.interceptors:
            try:
                await interceptor.before_compaction(reason, len(self.messages))
            except Exception as exc:  # noqa: BLE001 - observation only: an interceptor's bug must not stop it
                self._notice(f"the interceptor {interceptor.name} failed before compaction: {type(exc).__name__}: {exc}", "warning")
        ask = COMPACT_REQUEST + (f"\nAlso: {instructions.strip()}" if instructions.strip() else "")
        request = ModelRequest.model_construct(system=COMPACT_SYSTEM, messages=[*self.messages, UserMessage(content=ask)], tools=[])
        turn = await run_turn(self.provider, request, self.retry, None, self._notice)
        summary = turn.message.text.strip()
        if not summary:
            raise ProviderError("the model wrote an empty summary, so the conversation was not compacted")
        self.turns += 1
        self.usage = self.usage + turn.usage
        self.emit(UsageEvent(turn=self.turns, usage=turn.usage, total=self.usage))
        # The checkpoint's note is part of the summary in the record too, so a resumed session's
        # conversation is the one the model saw.
        note = self.compaction_note() if self.compaction_note is not None else ""
        if note:
            summary = f"{summary}\n\n{note}"
        event = Compaction(turn=self.turns, reason=reason, summary=summary, messages_before=len(self.messages),
                           input_tokens_before=self._last_input_tokens)
        self.messages[:] = compacted(summary)
        self._last_input_tokens = 0
        self.emit(event)
        return event

    def _check_stop(self, pending: AssistantMessage | None = None) -> None:
        if not self.stopping:
            return
        if pending is not None:
            # Its calls will not run: each gets a result, so the conversation stays valid.
            self.calls.refuse_all(self.turns, pending.tool_calls, self.messages)
        raise asyncio.CancelledError

    async def _completion(self, turn: int, text: str) -> Continuation | None:
        candidate = CompletionCandidate(turn=turn, text=text, session_id=self.session_id)
        for interceptor in self.interceptors:
            try:
                said = await interceptor.completion_candidate(candidate)
            except StructuredOutputExhausted:
                raise
            except Exception as exc:  # noqa: BLE001 - an interceptor's bug must not end the task
                self._notice(f"the interceptor {interceptor.name} failed at a completion candidate: {type(exc).__name__}: {exc}", "warning")
                continue
            if said is not None:
                return said
        return None

    def _notice(self, message: str, level: str = "info") -> None:
        self.emit(Notice(message=message, level=level))
