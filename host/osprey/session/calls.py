"""The tool-call path: interceptors, approvals and the hardline floor, then the tool, then results.

Read-only calls of one model turn run concurrently; every other call runs alone, in the model's
order. Results are reported and returned in the model's order whatever finished first.
"""

from __future__ import annotations

import asyncio
import codecs
import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..events import Event, ToolCallEvent, ToolResultEvent
from ..interception import Interceptor, PendingCall, Verdict, in_order
from ..messages import ImageBlock, Message, ToolCall, ToolResultMessage, kept_images
from ..policy.approvals import POLICY_SOURCE, ApprovalAnswer, ApprovalPolicy, ApprovalRequest, Approver, HeadlessApprover, proposed_rule, suggested_rule
from ..policy.floor import HardlineFloor
from ..tools.base import ToolContext, ToolRegistry, limit_text

CANCELLED_TEXT = "Error (cancelled): the user interrupted this call before it finished."
# Live output kept for a call that may be stopped; the ToolService streams at most the command's
# output limit, this bounds what a misbehaving one could make the broker hold.
MAX_STOPPED_OUTPUT_BYTES = 8 * 1024 * 1024
# What a call no interceptor decided on gets (a frozen verdict: one serves every call).
_DEFAULT_VERDICT = Verdict.allow("default")
_SCALARS = (str, int, float, bool, type(None))


def snapshot(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `arguments` that later changes to them (in place or nested) do not reach: a
    plain copy when every value is a scalar (a model's usual call), else a deep one."""
    if all(type(value) in _SCALARS for value in arguments.values()):
        return dict(arguments)
    return copy.deepcopy(dict(arguments))


@dataclass
class CallResult:
    ok: bool
    category: str | None
    text: str
    truncated_chars: int = 0
    duration_ms: int = 0
    images: list[ImageBlock] = field(default_factory=list)


class Progress:
    """What a running call has done so far: when it started and the live output it streamed, so a
    call stopped half-way keeps both."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.output = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = MAX_STOPPED_OUTPUT_BYTES - len(self.output)
        self.output += chunk[:max(room, 0)]
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def stopped(self, max_chars: int) -> CallResult:
        """The `cancelled` result of the call stopped now: its output so far, then a line saying it
        was stopped and after how long."""
        duration_ms = int((time.monotonic() - self.started) * 1000)
        if not self.output:
            return CallResult(False, "cancelled", CANCELLED_TEXT, duration_ms=duration_ms)
        text = codecs.decode(bytes(self.output), "utf-8", "replace").rstrip("\n")
        if self.dropped:
            text += f"\n[… {self.dropped} more bytes of output not kept]"
        text, truncated = limit_text(text, max_chars)
        status = f"[stopped after {duration_ms / 1000:.1f} s: the task was interrupted while this call ran; the output above is what it printed until then]"
        return CallResult(False, "cancelled", f"{text}\n{status}", truncated, duration_ms)


@dataclass
class CallPath:
    """Runs the tool calls of model turns through the session's interception points."""

    registry: ToolRegistry
    context: ToolContext
    policy: ApprovalPolicy
    emit: Callable[[Event], None]
    approver: Approver = field(default_factory=HeadlessApprover)
    # The session's interceptors (lifecycle hooks, stall detectors, ...): each runs at its declared
    # `order`, between the floor and the approval policy.
    interceptors: Iterable[Interceptor] = field(default_factory=list)
    workspace: str = ""
    # (call id, chunk) for live output of the calls that stream it (bash).
    on_output: Callable[[str, bytes], None] | None = None
    floor: HardlineFloor = field(default_factory=HardlineFloor)

    def chain(self, *, approved: bool = False) -> list[Interceptor]:
        """The interception points in their declared order: the floor, the session's interceptors,
        then approvals (left out for a call the person ran themselves, `approved`)."""
        if approved:
            return in_order([self.floor, *(i for i in self.interceptors if not i.model_only)])
        return in_order([self.floor, *self.interceptors, self.policy])

    async def run_for_user(self, turn: int, call: ToolCall, tools: ToolRegistry | None = None) -> CallResult:
        """Run one call the person asked for from a front end (`/diff`): the floor and the
        interceptors judge it as any call (the approval policy and the interceptors that judge the
        model's conduct do not: the person asked), its
        call and result are recorded with requested_by "user", and it is not part of the conversation.
        `tools`: where the tool is found (the session's built-in tools, whatever the model's
        catalogue offers); default the model's catalogue."""
        self.emit(ToolCallEvent(turn=turn, id=call.id, name=call.name, arguments=call.arguments, requested_by="user"))
        progress = Progress()
        try:
            result = await self._one(turn, call, approved=True, tools=tools, progress=progress)
        except asyncio.CancelledError:
            result = progress.stopped(self.registry.max_result_chars)
            self._report(turn, call, result, requested_by="user")
            raise
        self._report(turn, call, result, requested_by="user")
        return result

    async def run_batch(self, turn: int, calls: Sequence[ToolCall], into: list[Message]) -> None:
        """Run one model turn's calls; each result is appended to `into` in the model's order. When
        the batch is cancelled, calls that finished keep their results, calls that were running get
        a cancelled result with the output they printed and how long they ran, the others a
        cancelled result, and the cancellation propagates: the conversation stays valid."""
        for interceptor in self.chain():
            interceptor.begin_batch(turn)
        finished: dict[int, CallResult] = {}  # by position: a model may repeat a call id

        async def one(position: int, chain: list[Interceptor] | None = None) -> None:
            progress = Progress()
            try:
                finished[position] = await self._one(turn, calls[position], progress=progress, chain=chain)
            except asyncio.CancelledError:
                finished[position] = progress.stopped(self.registry.max_result_chars)
                raise

        reported = announced = 0
        try:
            for group in self._groups(calls):
                for position in group:
                    call = calls[position]
                    self.emit(ToolCallEvent(turn=turn, id=call.id, name=call.name, arguments=call.arguments))
                announced = group[-1] + 1
                if len(group) == 1:
                    await one(group[0])
                else:
                    chain = self.chain()  # (once for the calls that run together)
                    async with asyncio.TaskGroup() as tasks:
                        for position in group:
                            tasks.create_task(one(position, chain))
                for position in group:
                    into.append(self._report(turn, calls[position], finished[position]))
                    reported += 1
        except BaseException:
            for position in range(reported, len(calls)):
                call = calls[position]
                if position >= announced:
                    self.emit(ToolCallEvent(turn=turn, id=call.id, name=call.name, arguments=call.arguments))
                into.append(self._report(turn, call, finished.get(position) or CallResult(False, "cancelled", CANCELLED_TEXT)))
            raise
        finally:
            for interceptor in self.chain():
                interceptor.end_batch(turn)

    def refuse_all(self, turn: int, calls: Sequence[ToolCall], into: list[Message]) -> None:
        """The task stopped before these calls ran: each gets its call event and a cancelled result."""
        for call in calls:
            self.emit(ToolCallEvent(turn=turn, id=call.id, name=call.name, arguments=call.arguments))
            into.append(self._report(turn, call, CallResult(False, "cancelled", CANCELLED_TEXT)))

    def _read_only(self, call: ToolCall) -> bool:
        tool = self.registry.get(call.name)
        return tool is not None and tool.read_only and not call.arguments_error

    def _groups(self, calls: Sequence[ToolCall]) -> list[list[int]]:
        """Positions of the calls, grouped: consecutive read-only calls run concurrently; any other
        call is a group of its own."""
        groups: list[list[int]] = []
        for position, call in enumerate(calls):
            if self._read_only(call) and groups and self._read_only(calls[groups[-1][0]]):
                groups[-1].append(position)
            else:
                groups.append([position])
        return groups

    def _report(self, turn: int, call: ToolCall, result: CallResult, requested_by: Literal["user"] | None = None) -> ToolResultMessage:
        self.emit(ToolResultEvent(
            turn=turn, id=call.id, name=call.name, ok=result.ok, error_category=None if result.ok else result.category,
            output=result.text, truncated_chars=result.truncated_chars, duration_ms=result.duration_ms, requested_by=requested_by,
            **({"images": [image.model_dump() for image in result.images]} if result.images else {}),
        ))
        return ToolResultMessage(tool_call_id=call.id, name=call.name, content=result.text, is_error=not result.ok, images=result.images)

    async def _one(self, turn: int, call: ToolCall, *, progress: Progress, approved: bool = False, tools: ToolRegistry | None = None,
                   chain: list[Interceptor] | None = None) -> CallResult:
        result = await self._decide_and_run(turn, call, approved, tools or self.registry, progress, chain)
        result.duration_ms = int((time.monotonic() - progress.started) * 1000)
        return result

    async def _decide_and_run(self, turn: int, call: ToolCall, approved: bool, registry: ToolRegistry, progress: Progress,
                              chain: list[Interceptor] | None) -> CallResult:
        if call.arguments_error:
            if call.name:
                text = f"Error: the call to {call.name} could not be run: {call.arguments_error}. Send the arguments as a JSON object."
            else:
                text = f"Error: {call.arguments_error}; call one of the tools by its name: {', '.join(registry.names())}."
            return CallResult(False, "invalid_arguments", text)
        tool = registry.get(call.name)
        pending = PendingCall(id=call.id, name=call.name, arguments=dict(call.arguments), tool=tool, turn=turn, cwd=self.context.cwd, workspace=self.workspace or self.context.cwd)
        if tool is None:
            chain = []
        elif chain is None:
            chain = self.chain(approved=approved)  # (once: it is sorted)
        if tool is not None:
            try:
                verdict = await self._before(pending, chain)
            except Exception as exc:  # noqa: BLE001 - a failing interceptor or approver denies (fails closed)
                return CallResult(False, "internal", f"Error (internal): the call was not run: deciding whether it may run failed ({type(exc).__name__}: {exc})")
            if verdict.action == "deny":
                category = verdict.category or "denied"
                return CallResult(False, category, with_context(f"Error ({category}): {verdict.reason}", pending.context))
        sink = self.on_output

        def on_output(chunk: bytes) -> None:
            progress.add(chunk)
            if sink is not None:
                sink(call.id, chunk)

        outcome = await registry.call(pending.name, pending.arguments, self.context, call_id=call.id, on_output=on_output)
        if tool is not None:
            for interceptor in chain:
                try:
                    replaced = await interceptor.after_call(pending, outcome)
                except Exception as exc:  # noqa: BLE001 - the call ran; keep its result
                    self.emit_notice(f"the interceptor {interceptor.name} failed after {call.name}: {type(exc).__name__}: {exc}")
                    continue
                if replaced is not None:
                    outcome = replaced
        images, dropped = kept_images(outcome.images) if outcome.images else ([], "")
        text = with_context(outcome.text + dropped, pending.context)
        if not outcome.is_error:
            return CallResult(True, None, text, outcome.truncated_chars, images=images)
        return CallResult(False, outcome.category or "tool_error", text, outcome.truncated_chars, images=images)

    async def _before(self, call: PendingCall, chain: list[Interceptor]) -> Verdict:
        verdict = _DEFAULT_VERDICT
        judged = snapshot(call.arguments)  # what the floor, first in the chain, will judge
        for interceptor in chain:
            said = await interceptor.before_call(call)
            if said is not None and said.context:
                call.context.append(said.context)
            if said is None or said.action == "continue":
                if said is not None and said.arguments is not None:
                    call.arguments = dict(said.arguments)
                continue
            verdict = said
            break
        if verdict.action != "deny" and call.arguments != judged:
            # The floor judges what will actually run, whatever the interceptors after it did to
            # the input (replaced it, or changed it in place).
            floor = await self.floor.before_call(call)
            if floor is not None:
                return floor
        if verdict.action == "ask":
            return await self._ask(call, verdict)
        return verdict

    async def _ask(self, call: PendingCall, verdict: Verdict) -> Verdict:
        request = ApprovalRequest(
            call_id=call.id, tool=call.name, arguments=dict(call.arguments), policy=self.policy.policy,
            reason=verdict.reason, suggested_rule=suggested_rule(call.name, call.arguments, cwd=call.cwd, workspace=call.workspace),
            proposed_rule=proposed_rule(call.name, call.arguments, cwd=call.cwd, workspace=call.workspace),
            asked_by=verdict.source or POLICY_SOURCE,
        )
        answer: ApprovalAnswer = await self.approver.ask(request)
        if answer.decision == "deny":
            return Verdict.deny("approver", answer.reason or f"the user denied this {call.name} call")
        if answer.decision == "allow_always" and request.rememberable:
            from ..policy.rules import Rule, RuleError

            try:
                rule = Rule.parse(answer.rule or request.always_rule)
            except RuleError as exc:
                # The call was approved; only the rule to remember was unusable.
                self.emit_notice(f"the approval rule {answer.rule!r} is not valid, so it was not saved: {exc}")
            else:
                self.emit_notice(await self.policy.remember(rule, answer.scope), level="info")
        return Verdict.allow("approver")

    def emit_notice(self, message: str, level: str = "warning") -> None:
        from ..events import Notice

        self.emit(Notice(message=message, level=level))


def with_context(text: str, context: list[str]) -> str:
    """A result with the context interceptors added for the model after it."""
    if not context:
        return text
    return text + "".join(f"\n\n[context] {part}" for part in context)
