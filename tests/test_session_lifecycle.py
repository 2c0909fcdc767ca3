"""The session core at its edges: stops that race the work they stop, closing while a task ends,
failing interceptors, tools and approvers, and the on-failure latch with concurrent calls."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness, calls, check_stream, hang, text

from osprey.errors import ToolError
from osprey.events import Event
from osprey.interception import Interceptor, PendingCall, Verdict
from osprey.messages import AssistantMessage, ToolCall, ToolResultMessage
from osprey.tools.base import Invocation, Tool, ToolContext, ToolOutcome


@pytest.fixture
def h(workspace: Path, tmp_path: Path) -> Harness:
    (workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    return Harness(workspace, tmp_path / "osprey-home")


def kinds(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def schema_tool(name: str, run: Any, *, read_only: bool = False) -> Tool:
    return Tool(name, name, {"type": "object", "properties": {}}, run, read_only=read_only)


def conversation_is_whole(messages: list[Any]) -> bool:
    calls_made = [c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    answered = [m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)]
    return calls_made == answered


# ------------------------------------------------------------------ stops that race the work


@pytest.mark.parametrize("signal,outcome", [(2, "Cancelled"), (None, "Stopped")])
async def test_a_stop_that_lands_as_the_model_answers_is_kept(signal: int | None, outcome: str, h: Harness) -> None:
    holder: dict[str, Any] = {}

    async def answer_then_stop(request: Any) -> Any:
        # The stop arrives in the same loop iteration as the answer.
        asyncio.get_running_loop().call_soon(lambda: holder.__setitem__("ok", holder["session"].cancel(signal=signal)))
        return calls(ToolCall(id="c1", name="bash", arguments={"command": "touch ran_after_the_stop"}))

    session, provider = await h.start([answer_then_stop, text("never")])
    holder["session"] = session
    end = await asyncio.wait_for(session.submit("go"), 30)
    await session.close()
    assert holder["ok"] is True
    assert end.outcome == outcome and len(provider.requests) == 1
    assert not (h.workspace / "ran_after_the_stop").exists(), "a call ran after the stop was acknowledged"
    assert h.result("c1").error_category == "cancelled"
    assert conversation_is_whole(session.messages)
    check_stream(h.events)


async def test_a_stop_before_the_task_first_runs_keeps_the_prompt(h: Harness) -> None:
    session, _ = await h.start([text("x")])
    submitted = asyncio.ensure_future(session.submit("go"))
    await asyncio.sleep(0)  # submit() has scheduled the task, which has not run yet
    assert session.cancel(signal=2)
    end = await submitted
    await session.close()
    assert end.outcome == "Cancelled"
    assert kinds(h.events) == ["session_start", "user_message", "task_end", "session_end"]


async def test_when_the_caller_of_submit_is_cancelled_the_task_still_ends_in_the_record(h: Harness) -> None:
    session, _ = await h.start([hang])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(session.submit("go"), 0.5)
    end = await session.close()
    assert end is not None and end.outcome == "Stopped"
    assert kinds(h.events)[-2:] == ["task_end", "session_end"]


async def test_a_stopped_turn_then_a_new_prompt_keeps_the_conversation_valid(h: Harness) -> None:
    session, provider = await h.start([calls(ToolCall(id="t", name="tree", arguments={})), hang, text("fine")])
    submitted = asyncio.ensure_future(session.submit("go"))
    while len(provider.requests) < 2:
        await asyncio.sleep(0.01)
    session.cancel()
    await submitted
    again = await session.submit("again")
    await session.close()
    assert again.outcome == "Completed" and conversation_is_whole(session.messages)


# ------------------------------------------------------------------ closing


async def test_close_while_a_task_is_ending_writes_task_end_before_session_end(h: Harness) -> None:
    holder: dict[str, Any] = {}

    class CloseAtCompletion(Interceptor):
        async def completion_candidate(self, candidate: Any) -> None:
            holder["close"] = asyncio.ensure_future(holder["session"].close())  # a front end quitting
            return None

    session, _ = await h.start([text("the answer")], interceptors=(CloseAtCompletion(),))
    holder["session"] = session
    await asyncio.wait_for(session.submit("go"), 30)
    end = await asyncio.wait_for(holder["close"], 30)
    assert kinds(h.events)[-2:] == ["task_end", "session_end"]
    assert end is not None and end.final_text == "the answer"


async def test_close_is_idempotent_and_a_closed_session_does_not_start_again(h: Harness) -> None:
    session, _ = await h.start([text("x")])
    first, second = await asyncio.gather(session.close(), session.close())
    assert first is second is not None
    assert kinds(h.events).count("session_end") == 1
    with pytest.raises(RuntimeError, match="starts once"):
        await session.start()
    with pytest.raises(RuntimeError, match="not running"):
        await session.submit("late")


async def test_close_passes_on_the_cancellation_of_its_caller_after_tearing_down(h: Harness) -> None:
    async def slow_to_stop(request: Any) -> Any:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.3)  # a provider that needs a moment to clean up
        raise AssertionError

    session, provider = await h.start([slow_to_stop])
    submitted = asyncio.ensure_future(session.submit("go"))
    while not provider.requests:
        await asyncio.sleep(0.01)
    closer = asyncio.ensure_future(session.close())
    await asyncio.sleep(0.1)
    closer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closer
    await asyncio.gather(submitted, return_exceptions=True)
    assert kinds(h.events)[-2:] == ["task_end", "session_end"]


# ------------------------------------------------------------------ failures on the call path


async def test_a_failing_session_start_interceptor_is_reported_not_fatal(h: Harness) -> None:
    class Broken(Interceptor):
        name = "broken"

        async def session_start(self, event: Any) -> None:
            raise RuntimeError("hook failed")

    warnings: list[str] = []
    session, _ = await h.start([text("ok")], interceptors=(Broken(),), warn=warnings.append)
    assert (await session.submit("go")).outcome == "Completed"
    await session.close()
    assert any("broken" in w and "session_start" in w and "hook failed" in w for w in warnings), warnings


async def test_a_failing_interceptor_denies_its_call_and_the_others_run(h: Harness) -> None:
    class Broken(Interceptor):
        async def before_call(self, call: PendingCall) -> Verdict | None:
            if call.name == "tree":
                raise RuntimeError("hook bug")
            return None

    await h.run([calls(ToolCall(id="a", name="read_file", arguments={"path": "notes.txt"}),
                       ToolCall(id="b", name="tree", arguments={}),
                       ToolCall(id="c", name="list_directory", arguments={})), text("ok")], interceptors=(Broken(),))
    assert h.result("b").error_category == "internal" and "was not run" in h.result("b").output
    assert h.result("a").ok and h.result("c").ok


async def test_a_failing_approver_denies_the_call(h: Harness) -> None:
    class Broken:
        async def ask(self, request: Any) -> Any:
            raise RuntimeError("the prompt widget crashed")

    end, _ = await h.run([calls(ToolCall(id="w", name="write_file", arguments={"path": "x", "content": "y"})), text("ok")],
                         policy="on-request", approver=Broken())
    assert end.outcome == "Completed" and h.result("w").error_category == "internal"
    assert not (h.workspace / "x").exists()


async def test_a_tool_that_raises_fails_its_call_not_the_task(h: Harness) -> None:
    async def buggy(call: Invocation, ctx: ToolContext) -> str:
        raise ValueError("bug in a custom tool")

    async def failing(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome("it failed", is_error=True)

    session, _ = await h.start([calls(ToolCall(id="x", name="buggy", arguments={}), ToolCall(id="y", name="failing", arguments={})), text("ok")])
    assert session.registry is not None
    session.registry.add(schema_tool("buggy", buggy))
    session.registry.add(schema_tool("failing", failing))
    assert (await session.submit("go")).outcome == "Completed"
    await session.close()
    assert h.result("x").error_category == "internal" and "ValueError: bug in a custom tool" in h.result("x").output
    assert h.result("y").error_category == "tool_error"  # a failure always has a category
    check_stream(h.events)


async def test_calls_that_repeat_an_id_keep_their_own_results(h: Harness) -> None:
    (h.workspace / "a.txt").write_text("AAA\n")
    (h.workspace / "b.txt").write_text("BBB\n")
    session, _ = await h.start([calls(ToolCall(id="dup", name="read_file", arguments={"path": "a.txt"}),
                                      ToolCall(id="dup", name="read_file", arguments={"path": "b.txt"})), text("done")])
    await session.submit("go")
    await session.close()
    outputs = [m.content for m in session.messages if isinstance(m, ToolResultMessage)]
    assert "AAA" in outputs[0] and "BBB" in outputs[1]


# ------------------------------------------------------------------ on-failure through the session


async def test_on_failure_a_read_only_success_does_not_clear_the_latch(h: Harness) -> None:
    await h.run([
        calls(ToolCall(id="fail", name="bash", arguments={"command": "exit 3"})),
        calls(ToolCall(id="ro", name="read_file", arguments={"path": "notes.txt"})),
        calls(ToolCall(id="w", name="write_file", arguments={"path": "after.txt", "content": "x"})),
        text("done"),
    ], policy="on-failure")
    assert not h.result("fail").ok and h.result("ro").ok
    assert h.result("w").error_category == "denied" and not (h.workspace / "after.txt").exists()


@pytest.mark.parametrize("failing_finishes_first", [True, False])
async def test_on_failure_a_concurrent_group_latches_whatever_finishes_last(failing_finishes_first: bool, h: Harness) -> None:
    def sleeper(seconds: float, fail: bool) -> Any:
        async def run(call: Invocation, ctx: ToolContext) -> str:
            await asyncio.sleep(seconds)
            if fail:
                raise ToolError("not_found", "nope")
            return "ok"
        return run

    session, _ = await h.start([calls(ToolCall(id="x", name="good", arguments={}), ToolCall(id="y", name="bad", arguments={})), text("done")],
                               policy="on-failure")
    assert session.registry is not None and session.policy is not None
    session.registry.add(schema_tool("good", sleeper(0.3 if failing_finishes_first else 0.0, False), read_only=True))
    session.registry.add(schema_tool("bad", sleeper(0.0 if failing_finishes_first else 0.3, True), read_only=True))
    await session.submit("go")
    await session.close()
    assert session.policy.failure_latched
