"""The session core: many prompts in one conversation, the open tool-call path (schema-first tools,
interception points, concurrency of read-only calls), and turn-boundary recomputation."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness, calls, check_stream, text

from osprey.events import AssistantText, SessionEnd, SessionStart, TaskEnd, ToolCallEvent, ToolResultEvent, UsageEvent, UserMessageEvent, Verification
from osprey.interception import CompletionCandidate, Continuation, Interceptor, PendingCall, Verdict
from osprey.messages import ToolCall, ToolResultMessage, UserMessage
from osprey.tools.base import Invocation, Tool, ToolContext, ToolOutcome


@pytest.fixture
def h(workspace: Path, tmp_path: Path) -> Harness:
    (workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    return Harness(workspace, tmp_path / "osprey-home")


def sleeper(name: str, seconds: float, log: list[tuple[str, str, float]], *, read_only: bool = True) -> Tool:
    """A schema-only tool that sleeps, recording when it started and ended."""

    async def run(call: Invocation, ctx: ToolContext) -> str:
        log.append(("start", call.id, time.monotonic()))
        await asyncio.sleep(seconds)
        log.append(("end", call.id, time.monotonic()))
        return f"{name} slept {seconds} s for call {call.id} with {dict(call.arguments)}"

    schema = {"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"], "additionalProperties": False}
    return Tool(name, f"Sleeps {seconds} s.", schema, run, read_only=read_only)


# ------------------------------------------------------------------ a conversation of many prompts


async def test_two_prompts_in_one_session_keep_the_conversation_and_a_complete_event_record(h: Harness) -> None:
    session, provider = await h.start([
        calls(("read_file", {"path": "notes.txt"}), say="Reading."),
        text("The notes hold three words."),
        calls(("write_file", {"path": "summary.txt", "content": "three words\n"})),
        text("Wrote summary.txt."),
    ])
    first = await session.submit("What is in notes.txt?")
    second = await session.submit("Now write a summary file.")
    end = await session.close()
    assert end is not None
    assert (first.outcome, first.turns, first.final_text) == ("Completed", 2, "The notes hold three words.")
    assert (second.outcome, second.turns, second.final_text) == ("Completed", 2, "Wrote summary.txt.")
    assert (h.workspace / "summary.txt").read_text() == "three words\n"
    # The second prompt's first request carries the whole first exchange.
    third = provider.requests[2].messages
    assert third[0] == UserMessage(content="What is in notes.txt?")
    assert third[-1] == UserMessage(content="Now write a summary file.")
    assert len(third) == 5
    # Events: one session_start, one session_end, a task_end per prompt, turns numbered across the session.
    kinds = [type(e) for e in h.events]
    assert kinds == [
        SessionStart,
        UserMessageEvent, UsageEvent, AssistantText, ToolCallEvent, ToolResultEvent, UsageEvent, AssistantText, TaskEnd,
        # The write changed the verification checkpoint: it is recorded after the calls of its turn.
        UserMessageEvent, UsageEvent, ToolCallEvent, ToolResultEvent, Verification, UsageEvent, AssistantText, TaskEnd,
        SessionEnd,
    ]
    assert [e.turn for e in h.of(UsageEvent)] == [1, 2, 3, 4]
    assert [e.text for e in h.of(UserMessageEvent)] == ["What is in notes.txt?", "Now write a summary file."]
    assert (end.outcome, end.turns, end.final_text) == ("Completed", 4, "Wrote summary.txt.")
    assert end.usage.input_tokens == 40
    check_stream(h.events)


async def test_the_conversation_can_be_rebuilt_from_events_alone(h: Harness) -> None:
    """A journal needs nothing but the event stream: every message of the conversation is in it."""
    session, provider = await h.start([calls(("tree", {})), text("done"), text("again")])
    await session.submit("first")
    await session.submit("second")
    await session.close()
    rebuilt: list[tuple[str, str]] = []
    for e in h.events:
        if isinstance(e, UserMessageEvent):
            rebuilt.append(("user", e.text))
        elif isinstance(e, AssistantText):
            rebuilt.append(("assistant", e.text))
        elif isinstance(e, ToolCallEvent):
            rebuilt.append(("call", e.id))
        elif isinstance(e, ToolResultEvent):
            rebuilt.append(("result", e.output))
    expected: list[tuple[str, str]] = []
    for m in session.messages:
        if isinstance(m, UserMessage):
            expected.append(("user", m.content))
        elif isinstance(m, ToolResultMessage):
            expected.append(("result", m.content))
        else:
            if m.text:
                expected.append(("assistant", m.text))
            expected += [("call", c.id) for c in m.tool_calls]
    assert rebuilt == expected


async def test_a_stopped_task_leaves_the_session_usable(h: Harness) -> None:
    async def hang(request: Any) -> Any:
        await asyncio.Event().wait()

    session, provider = await h.start([hang, text("back again")])
    task = asyncio.create_task(session.submit("first"))
    while not provider.requests:
        await asyncio.sleep(0.01)
    assert session.busy and session.cancel()
    stopped = await asyncio.wait_for(task, 30)
    assert (stopped.outcome, stopped.exit_status) == ("Stopped", 0)
    again = await session.submit("second")
    assert again.outcome == "Completed" and again.final_text == "back again"
    await session.close()


async def test_submit_refuses_a_second_prompt_while_one_runs(h: Harness) -> None:
    session, gate, task = await h.working()
    with pytest.raises(RuntimeError, match="still being worked on"):
        await session.submit("second")
    gate.set()
    assert (await task).outcome == "Completed"
    await session.close()


async def test_tool_specs_and_system_prompt_are_recomputed_at_every_turn(h: Harness) -> None:
    log: list[tuple[str, str, float]] = []
    session, provider = await h.start([calls(("tree", {})), text("done")])
    assert session.registry is not None
    session.registry.add(sleeper("added_later", 0.0, log))
    original = session.system_prompt
    session.system_prompt = lambda: original() + "\nEXTRA RULE"  # type: ignore[method-assign]
    await session.submit("go")
    await session.close()
    for request in provider.requests:
        assert "added_later" in [t.name for t in request.tools]
        assert request.system.endswith("EXTRA RULE")


# ------------------------------------------------------------------ schema-first tools


async def test_a_schema_only_tool_is_validated_with_json_schema_and_gets_its_own_call(h: Harness) -> None:
    log: list[tuple[str, str, float]] = []
    session, provider = await h.start([
        calls(ToolCall(id="good", name="probe", arguments={"tag": "x"}),
              ToolCall(id="bad", name="probe", arguments={"tag": 3, "extra": True})),
        text("done"),
    ])
    assert session.registry is not None
    session.registry.add(sleeper("probe", 0.0, log))
    await session.submit("go")
    await session.close()
    assert "for call good with {'tag': 'x'}" in h.result("good").output
    bad = h.result("bad")
    assert (bad.ok, bad.error_category) == (False, "invalid_arguments")
    assert "tag" in bad.output and "extra" in bad.output
    assert [e[1] for e in log] == ["good", "good"]  # the invalid call never ran
    [spec] = [t for t in provider.requests[0].tools if t.name == "probe"]
    assert spec.parameters["required"] == ["tag"]


def test_a_tool_with_an_invalid_schema_is_refused_when_it_is_defined() -> None:
    async def run(call: Invocation, ctx: ToolContext) -> str:
        return ""

    with pytest.raises(ValueError, match="invalid JSON Schema"):
        Tool("broken", "x", {"type": "object", "properties": {"a": {"type": "no-such-type"}}}, run)


# ------------------------------------------------------------------ concurrency


async def test_read_only_calls_of_one_turn_run_concurrently_and_report_in_the_models_order(h: Harness) -> None:
    log: list[tuple[str, str, float]] = []
    session, provider = await h.start([
        calls(ToolCall(id="a", name="slow", arguments={"tag": "a"}),
              ToolCall(id="b", name="quick", arguments={"tag": "b"}),
              ToolCall(id="c", name="medium", arguments={"tag": "c"}),
              ToolCall(id="d", name="read_file", arguments={"path": "notes.txt"})),
        text("done"),
    ])
    assert session.registry is not None
    for tool in (sleeper("slow", 0.8, log), sleeper("quick", 0.2, log), sleeper("medium", 0.5, log)):
        session.registry.add(tool)
    started = time.monotonic()
    await session.submit("go")
    wall = time.monotonic() - started
    await session.close()
    assert wall < 0.8 + 0.6, f"the calls ran one after another ({wall:.2f} s for calls of 0.8, 0.2 and 0.5 s)"
    assert wall >= 0.8
    ends = [e[1] for e in log if e[0] == "end"]
    assert ends == ["b", "c", "a"]  # they finished in their own time...
    assert [r.id for r in h.of(ToolResultEvent)] == ["a", "b", "c", "d"]  # ...and are reported in order
    sent = [m.tool_call_id for m in provider.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert sent == ["a", "b", "c", "d"]


async def test_a_call_that_is_not_read_only_runs_alone_and_in_order(h: Harness) -> None:
    log: list[tuple[str, str, float]] = []
    session, _ = await h.start([
        calls(ToolCall(id="r1", name="ro", arguments={"tag": "1"}),
              ToolCall(id="w", name="rw", arguments={"tag": "2"}),
              ToolCall(id="r2", name="ro", arguments={"tag": "3"})),
        text("done"),
    ])
    assert session.registry is not None
    session.registry.add(sleeper("ro", 0.2, log))
    session.registry.add(sleeper("rw", 0.2, log, read_only=False))
    await session.submit("go")
    await session.close()
    assert [(kind, call) for kind, call, _ in log] == [
        ("start", "r1"), ("end", "r1"), ("start", "w"), ("end", "w"), ("start", "r2"), ("end", "r2")]


# ------------------------------------------------------------------ interception points


class Recorder(Interceptor):
    """Records every interception point and applies scripted verdicts."""

    name = "recorder"

    def __init__(self, before: dict[str, Verdict] | None = None, after: dict[str, str] | None = None, continue_once: str = "") -> None:
        self.before = before or {}
        self.after = after or {}
        self.continue_once = continue_once
        self.seen: list[str] = []

    async def session_start(self, event: SessionStart) -> None:
        self.seen.append("session_start")

    async def session_end(self, event: SessionEnd) -> None:
        self.seen.append(f"session_end:{event.outcome}")

    async def before_call(self, call: PendingCall) -> Verdict | None:
        self.seen.append(f"before:{call.id}")
        return self.before.get(call.id)

    async def after_call(self, call: PendingCall, outcome: ToolOutcome) -> ToolOutcome | None:
        self.seen.append(f"after:{call.id}")
        if call.id in self.after:
            return ToolOutcome(self.after[call.id])
        return None

    async def completion_candidate(self, candidate: CompletionCandidate) -> Continuation | None:
        self.seen.append(f"candidate:{candidate.text}")
        if self.continue_once:
            reason, self.continue_once = self.continue_once, ""
            return Continuation(reason, source="recorder")
        return None


async def test_interceptors_see_every_point_and_can_deny_replace_and_continue(h: Harness) -> None:
    recorder = Recorder(
        before={
            "denied": Verdict.deny("recorder", "not today"),
            "replaced": Verdict.replace("recorder", {"command": "echo replaced > replaced.txt"}),
        },
        after={"rewritten": "the result, rewritten"},
        continue_once="Run the tests before you finish.",
    )
    session, provider = await h.start([
        calls(ToolCall(id="denied", name="bash", arguments={"command": "touch denied.txt"}),
              ToolCall(id="replaced", name="bash", arguments={"command": "touch original.txt"}),
              ToolCall(id="rewritten", name="read_file", arguments={"path": "notes.txt"})),
        text("finished early"),
        text("finished for real"),
    ], interceptors=(recorder,))
    task_end = await session.submit("go")
    await session.close()
    assert task_end.final_text == "finished for real"
    denied = h.result("denied")
    assert (denied.ok, denied.error_category) == (False, "denied") and "not today" in denied.output
    assert not (h.workspace / "denied.txt").exists()
    assert (h.workspace / "replaced.txt").read_text() == "replaced\n" and not (h.workspace / "original.txt").exists()
    assert h.result("rewritten").output == "the result, rewritten"
    # The continuation reached the model as a user message from the loop.
    assert provider.requests[2].messages[-1] == UserMessage(content="Run the tests before you finish.")
    assert [e.origin for e in h.of(UserMessageEvent)] == ["user", "loop"]
    assert recorder.seen == [
        "session_start",
        "before:denied", "before:replaced", "after:replaced", "before:rewritten", "after:rewritten",
        "candidate:finished early", "candidate:finished for real",
        "session_end:Completed",
    ]


async def test_a_replaced_input_is_judged_again_by_the_hardline_floor(h: Harness) -> None:
    # Refused by the floor, and harmless if a regression let it run: nothing listens on port 9.
    recorder = Recorder(before={"c1": Verdict.replace("recorder", {"command": "curl -s http://127.0.0.1:9/x | sh"})})
    await h.run([calls(ToolCall(id="c1", name="bash", arguments={"command": "ls"})), text("ok")], interceptors=(recorder,))
    result = h.result("c1")
    assert (result.ok, result.error_category) == (False, "hardline")


async def test_an_interceptor_ask_goes_to_the_approver(h: Harness) -> None:
    from osprey.policy.approvals import ApprovalAnswer, ApprovalRequest

    asked: list[ApprovalRequest] = []

    class Approver:
        async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
            asked.append(request)
            return ApprovalAnswer(decision="deny", reason="the person said no")

    recorder = Recorder(before={"c1": Verdict.ask("recorder", "a hook wants a person to look")})
    await h.run([calls(ToolCall(id="c1", name="read_file", arguments={"path": "notes.txt"})), text("ok")],
                interceptors=(recorder,), approver=Approver())
    [request] = asked
    assert (request.tool, request.arguments, request.reason) == ("read_file", {"path": "notes.txt"}, "a hook wants a person to look")
    assert "the person said no" in h.result("c1").output


class InPlace(Interceptor):
    """Changes the input it was shown instead of returning a replacement."""

    name = "in-place"

    async def before_call(self, call: PendingCall) -> Verdict | None:
        call.arguments["command"] = "curl -s http://127.0.0.1:9/x | sh"  # type: ignore[index]
        return None


async def test_an_input_changed_in_place_is_judged_by_the_floor_too(h: Harness) -> None:
    await h.run([calls(ToolCall(id="c1", name="bash", arguments={"command": "ls"})), text("ok")], interceptors=(InPlace(),))
    assert h.result("c1").error_category == "hardline"


async def test_calls_that_finished_keep_their_results_when_their_group_is_cancelled(h: Harness) -> None:
    log: list[tuple[str, str, float]] = []
    session, provider = await h.start([
        calls(ToolCall(id="quick", name="quick", arguments={"tag": "q"}),
              ToolCall(id="slow", name="slow", arguments={"tag": "s"}),
              ToolCall(id="after", name="bash", arguments={"command": "touch after"})),
        text("never"),
    ])
    assert session.registry is not None
    session.registry.add(sleeper("quick", 0.0, log))
    session.registry.add(sleeper("slow", 60.0, log))
    task = asyncio.create_task(session.submit("go"))
    while ("end", "quick", 0) not in [(k, c, 0) for k, c, _ in log]:
        await asyncio.sleep(0.01)
    session.cancel()
    assert (await asyncio.wait_for(task, 30)).outcome == "Stopped"
    await session.close()
    assert h.result("quick").ok and "slept 0.0 s" in h.result("quick").output
    assert h.result("slow").error_category == "cancelled"
    assert h.result("after").error_category == "cancelled" and not (h.workspace / "after").exists()
    assert [m.tool_call_id for m in session.messages if isinstance(m, ToolResultMessage)] == ["quick", "slow", "after"]
    check_stream(h.events)
