"""The headless agent loop: model turn, tool calls, results, until the model answers without tools."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from .approvals import ApprovalGate
from .config import RetrySettings
from .errors import ProviderError
from .events import AssistantText, Event, Notice, SessionEnd, SessionStart, ToolCallEvent, ToolResultEvent, UsageEvent
from .messages import AssistantMessage, Message, ModelRequest, ModelTurn, ToolResultMessage, Usage, UserMessage
from .providers.base import Provider, TextSink
from .tools.base import ToolContext, ToolRegistry

# Outcomes and their headless exit statuses.
COMPLETED = "Completed"
MAX_CONTINUATIONS = "MaxContinuations"
ACTIONLESS_TIMEOUT = "ActionlessTimeout"
CANCELLED = "Cancelled"
ERROR = "Error"

EMPTY_COMPLETIONS_TOLERATED = 2
ACTIONLESS_TIMEOUTS = 2
EMPTY_CORRECTION = "Your last reply was empty. Continue the task: call a tool, or give your final answer as text."


class TurnTimeout(Exception):
    """A logical model turn passed its deadline (across all its retries)."""


async def run_turn(provider: Provider, request: ModelRequest, retry: RetrySettings, on_text: TextSink | None = None, notify: Callable[[str], None] | None = None) -> ModelTurn:
    """One logical turn: a deadline across the first request and its retries."""
    deadline = time.monotonic() + retry.turn_timeout
    attempt = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TurnTimeout(f"the model did not answer within {retry.turn_timeout:g} s")
        try:
            return await asyncio.wait_for(provider.complete(request, on_text), remaining)
        except asyncio.TimeoutError:
            raise TurnTimeout(f"the model did not answer within {retry.turn_timeout:g} s") from None
        except ProviderError as exc:
            if not exc.retryable or attempt >= retry.max_retries:
                raise
            delay = retry.delays[min(attempt, len(retry.delays) - 1)] if retry.delays else 0.0
            attempt += 1
            if deadline - time.monotonic() <= delay:
                raise TurnTimeout(f"the model did not answer within {retry.turn_timeout:g} s (last error: {exc})") from None
            if notify:
                notify(f"retrying the model request in {delay:g} s (retry {attempt} of {retry.max_retries}): {exc}")
            await asyncio.sleep(delay)


@dataclass
class AgentLoop:
    """Drives one headless session; every observable step is emitted as an Event."""

    provider: Provider
    registry: ToolRegistry
    context: ToolContext
    system: str
    emit: Callable[[Event], None]
    retry: RetrySettings = field(default_factory=RetrySettings)
    max_turns: int = 150
    approval: ApprovalGate = field(default_factory=lambda: ApprovalGate("deny-untrusted"))
    on_text: TextSink | None = None
    tool_service: str = "local"
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    # Exit status reported when the run is cancelled: 130 for an external Ctrl-C.
    cancel_exit_status: int = 130
    messages: list[Message] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    _turns: int = field(default=0, init=False)
    _final_text: str = field(default="", init=False)

    async def run(self, prompt: str) -> SessionEnd:
        self.emit(SessionStart(
            session_id=self.session_id, provider=self.provider.name, model=self.provider.model,
            cwd=self.context.cwd, tool_service=self.tool_service, tools=self.registry.names(),
            approval_policy=self.approval.policy, max_turns=self.max_turns,
        ))
        self.messages.append(UserMessage(content=prompt))
        try:
            outcome, status, error = await self._drive()
        except asyncio.CancelledError:
            outcome, status, error = CANCELLED, self.cancel_exit_status, None
        except Exception as exc:
            # A bug, not a model or tool problem: still end the event stream, then let it surface.
            self.emit(self._end(ERROR, 1, f"internal error: {type(exc).__name__}: {exc}"))
            raise
        end = self._end(outcome, status, error)
        self.emit(end)
        return end

    def _end(self, outcome: str, status: int, error: str | None) -> SessionEnd:
        return SessionEnd(
            session_id=self.session_id, outcome=outcome, exit_status=status, turns=self._turns,
            usage=self.usage, final_text=self._final_text, error=error,
        )

    async def _drive(self) -> tuple[str, int, str | None]:
        empty_streak = 0
        timeout_streak = 0
        specs = self.registry.specs()
        while True:
            if self._turns >= self.max_turns:
                return MAX_CONTINUATIONS, 1, f"the model was still working after {self.max_turns} turns (--max-turns)"
            self._turns += 1
            turn_no = self._turns
            request = ModelRequest(system=self.system, messages=list(self.messages), tools=specs)
            try:
                turn = await run_turn(self.provider, request, self.retry, self.on_text, self._notice)
            except TurnTimeout as exc:
                timeout_streak += 1
                if timeout_streak >= ACTIONLESS_TIMEOUTS:
                    return ACTIONLESS_TIMEOUT, 1, f"{exc}, {timeout_streak} turns in a row"
                self._notice(f"{exc}; asking again")
                continue
            except ProviderError as exc:
                return ERROR, 1, str(exc)
            timeout_streak = 0
            self.usage = self.usage + turn.usage
            self.emit(UsageEvent(turn=turn_no, usage=turn.usage, total=self.usage))
            message = turn.message
            if message.text:
                self.emit(AssistantText(turn=turn_no, text=message.text))
            if not message.text.strip() and not message.tool_calls:
                empty_streak += 1
                if empty_streak > EMPTY_COMPLETIONS_TOLERATED:
                    return ERROR, 1, f"the model returned {empty_streak} empty replies in a row"
                self._notice("the model returned an empty reply; asking it to continue")
                self.messages.append(UserMessage(content=EMPTY_CORRECTION))
                continue
            empty_streak = 0
            self.messages.append(message)
            if not message.tool_calls:
                self._final_text = message.text
                return COMPLETED, 0, None
            await self._run_tools(turn_no, message)

    async def _run_tools(self, turn_no: int, message: AssistantMessage) -> None:
        self.approval.begin_batch()
        for call in message.tool_calls:
            self.emit(ToolCallEvent(turn=turn_no, id=call.id, name=call.name, arguments=call.arguments))
            started = time.monotonic()
            if call.arguments_error:
                if call.name:
                    text = f"Error: the call to {call.name} could not be run: {call.arguments_error}. Send the arguments as a JSON object."
                else:
                    text = f"Error: {call.arguments_error}; call one of the tools by its name: {', '.join(self.registry.names())}."
                ok, category, dropped = False, "invalid_arguments", 0
            else:
                decision = self.approval.decide(call.name) if call.name in self.registry.tools else None
                if decision is not None and not decision.allowed:
                    ok, category, text, dropped = False, "denied", f"Error (denied): {decision.reason}", 0
                else:
                    self.context.call_id = call.id
                    outcome = await self.registry.call(call.name, call.arguments, self.context)
                    ok, category, text, dropped = not outcome.is_error, outcome.category, outcome.text, outcome.truncated_chars
                    self.approval.record(ok)
            self.emit(ToolResultEvent(
                turn=turn_no, id=call.id, name=call.name, ok=ok, error_category=None if ok else category,
                output=text, truncated_chars=dropped, duration_ms=int((time.monotonic() - started) * 1000),
            ))
            self.messages.append(ToolResultMessage(tool_call_id=call.id, name=call.name, content=text, is_error=not ok))

    def _notice(self, message: str, level: str = "info") -> None:
        self.emit(Notice(message=message, level=level))  # type: ignore[arg-type]
