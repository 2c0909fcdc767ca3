"""The session core and its loop with a small fake provider and a real local ToolService.

The provider is scripted in process (no HTTP); the tools run for real through the local dispatcher
against a temporary workspace, so approvals, argument checks and truncation are seen end to end.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness, calls, check_stream, empty, hang, text

from osprey.config import RetrySettings
from osprey.errors import ProviderError
from osprey.events import AssistantText, Notice, SessionEnd, SessionStart, TaskEnd, ToolCallEvent, ToolResultEvent, UsageEvent, UserMessageEvent
from osprey.messages import AssistantMessage, ModelTurn, ToolCall, ToolResultMessage, Usage, UserMessage
from osprey.session.loop import EMPTY_CORRECTION


@pytest.fixture
def h(workspace: Path, tmp_path: Path) -> Harness:
    (workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    return Harness(workspace, tmp_path / "osprey-home")


# ------------------------------------------------------------------ completion


async def test_a_reply_without_tool_calls_completes_the_session(h: Harness) -> None:
    end, provider = await h.run([text("Nothing to do: the task is already done.", usage=(120, 30))])
    assert (end.outcome, end.exit_status, end.turns, end.error) == ("Completed", 0, 1, None)
    assert end.final_text == "Nothing to do: the task is already done."
    assert end.usage == Usage(input_tokens=120, output_tokens=30)
    assert [type(e) for e in h.events] == [SessionStart, UserMessageEvent, UsageEvent, AssistantText, TaskEnd, SessionEnd]
    assert h.texts == ["Nothing to do: the task is already done."]
    start = h.events[0]
    assert isinstance(start, SessionStart)
    assert (start.provider, start.model, start.approval_policy, start.max_turns) == ("fake", "fake-1", "never", 150)
    assert h.session is not None and start.tools == h.session.tool_names() and "read_file" in start.tools
    assert h.events[1] == UserMessageEvent(text="Do the task.", ts=h.events[1].ts)
    [request] = provider.requests
    assert request.system.startswith("You are Osprey") and str(h.workspace) in request.system
    assert request.messages == [UserMessage(content="Do the task.")]
    assert [t.name for t in request.tools] == start.tools


async def test_text_with_tool_calls_does_not_complete(h: Harness) -> None:
    end, provider = await h.run([
        calls(("read_file", {"path": "notes.txt"}), say="First I will read the notes."),
        text("The notes list three Greek letters."),
    ])
    assert end.outcome == "Completed" and end.turns == 2
    assert end.final_text == "The notes list three Greek letters."
    # The second request carries the first turn and its result, in order.
    second = provider.requests[1].messages
    assert isinstance(second[1], AssistantMessage) and second[1].text == "First I will read the notes."
    assert isinstance(second[2], ToolResultMessage) and "beta" in second[2].content and not second[2].is_error
    assert second[2].tool_call_id == second[1].tool_calls[0].id
    check_stream(h.events)


async def test_a_batch_of_calls_runs_in_order_and_every_call_gets_a_result(h: Harness) -> None:
    end, provider = await h.run([
        calls(("write_file", {"path": "out/new.txt", "content": "one\n"}),
              ("edit_file", {"path": "out/new.txt", "old_string": "one", "new_string": "two"}),
              ("bash", {"command": "cat out/new.txt"})),
        text("done"),
    ])
    assert end.outcome == "Completed"
    assert (h.workspace / "out/new.txt").read_text() == "two\n"
    results = h.of(ToolResultEvent)
    assert [r.name for r in results] == ["write_file", "edit_file", "bash"]
    assert all(r.ok for r in results)
    assert "two" in results[2].output and "[exit code 0]" in results[2].output
    sent = [m for m in provider.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert [m.tool_call_id for m in sent] == [c.id for c in h.of(ToolCallEvent)]
    check_stream(h.events)


async def test_max_turns_stops_a_model_that_keeps_calling_tools(h: Harness) -> None:
    end, provider = await h.run([calls(("list_directory", {})) for _ in range(10)], max_turns=3)
    assert (end.outcome, end.exit_status, end.turns) == ("MaxContinuations", 1, 3)
    assert "3 turns" in (end.error or "")
    assert len(provider.requests) == 3  # no fourth model call
    assert len(h.of(ToolResultEvent)) == 3
    assert end.usage == Usage(input_tokens=30, output_tokens=15)
    check_stream(h.events)


async def test_max_turns_allows_a_final_answer_on_the_last_turn(h: Harness) -> None:
    end, _ = await h.run([calls(("tree", {})), text("done")], max_turns=2)
    assert (end.outcome, end.exit_status) == ("Completed", 0)


# ------------------------------------------------------------------ empty completions


async def test_two_empty_completions_are_tolerated_with_corrective_messages(h: Harness) -> None:
    end, provider = await h.run([empty(), ModelTurn(message=AssistantMessage(text="  \n "), usage=Usage(input_tokens=3)), text("Done after all.")])
    assert (end.outcome, end.exit_status, end.turns) == ("Completed", 0, 3)
    assert provider.requests[1].messages[-1] == UserMessage(content=EMPTY_CORRECTION)
    assert provider.requests[2].messages[-2:] == [UserMessage(content=EMPTY_CORRECTION)] * 2
    # Empty replies are not kept in the history.
    assert not any(isinstance(m, AssistantMessage) for m in provider.requests[2].messages)
    assert sum("empty" in n.message for n in h.of(Notice)) == 2
    assert end.usage.input_tokens == 3 + 3 + 10  # usage of empty turns still counts
    check_stream(h.events)


async def test_the_third_empty_completion_in_a_row_fails(h: Harness) -> None:
    end, provider = await h.run([empty(), empty(), empty(), text("never reached")])
    assert (end.outcome, end.exit_status, end.turns) == ("Error", 1, 3)
    assert "3 empty replies" in (end.error or "")
    assert len(provider.requests) == 3
    check_stream(h.events)


async def test_the_empty_streak_resets_after_a_real_turn(h: Harness) -> None:
    end, provider = await h.run([empty(), empty(), calls(("tree", {})), empty(), empty(), text("ok")])
    assert end.outcome == "Completed" and end.turns == 6
    # After the corrections, a tool result follows: the corrective message goes after it.
    last = provider.requests[-1].messages
    assert isinstance(last[-3], ToolResultMessage) and last[-2:] == [UserMessage(content=EMPTY_CORRECTION)] * 2


# ------------------------------------------------------------------ approvals


async def test_policy_never_runs_every_tool(h: Harness) -> None:
    end, _ = await h.run([
        calls(("edit_file", {"path": "notes.txt", "old_string": "beta", "new_string": "BETA"}), ("bash", {"command": "touch ran"})),
        text("done"),
    ], policy="never")
    assert end.outcome == "Completed"
    assert "BETA" in (h.workspace / "notes.txt").read_text()
    assert (h.workspace / "ran").exists()
    assert all(r.ok for r in h.of(ToolResultEvent))


@pytest.mark.parametrize("policy", ["deny-untrusted", "unless-trusted", "on-request"])
async def test_untrusted_tools_are_denied_without_a_prompt(policy: str, h: Harness) -> None:
    before = (h.workspace / "notes.txt").read_text()
    end, provider = await h.run([
        calls(("read_file", {"path": "notes.txt"}),
              ("edit_file", {"path": "notes.txt", "old_string": "beta", "new_string": "BETA"}),
              ("write_file", {"path": "new.txt", "content": "x"}),
              ("bash", {"command": "touch ran"})),
        text("I could only read."),
    ], policy=policy)
    assert end.outcome == "Completed"  # a denial is a tool result, not the end of the session
    assert (h.workspace / "notes.txt").read_text() == before
    assert not (h.workspace / "new.txt").exists() and not (h.workspace / "ran").exists()
    results = {r.name: r for r in h.of(ToolResultEvent)}
    for name in ("edit_file", "write_file", "bash"):
        assert not results[name].ok and results[name].error_category == "denied"
        assert "--yolo" in results[name].output  # says what the user can do
    assert results["read_file"].ok and "beta" in results["read_file"].output  # read-only: it requests nothing
    # The model is told about each denial as an error result.
    sent = {m.name: m for m in provider.requests[1].messages if isinstance(m, ToolResultMessage)}
    assert sent["bash"].is_error and "denied" in sent["bash"].content
    check_stream(h.events)


async def test_deny_untrusted_names_the_policy_and_the_trusted_tools(h: Harness) -> None:
    await h.run([calls(("bash", {"command": "true"})), text("ok")], policy="deny-untrusted")
    [result] = h.of(ToolResultEvent)
    assert "deny-untrusted" in result.output
    for tool in ("read_file", "find_files", "grep", "list_directory", "tree"):
        assert tool in result.output


@pytest.mark.parametrize("tool,args", [
    ("read_file", {"path": "notes.txt"}), ("find_files", {"pattern": "*.txt"}), ("grep", {"pattern": "beta"}),
    ("list_directory", {}), ("tree", {}),
])
async def test_deny_untrusted_runs_every_trusted_read_only_tool(tool: str, args: dict[str, Any], h: Harness) -> None:
    await h.run([calls((tool, args)), text("ok")], policy="deny-untrusted")
    [result] = h.of(ToolResultEvent)
    assert result.ok, result.output


async def test_on_failure_latches_after_a_failure_for_the_next_batch(h: Harness) -> None:
    end, _ = await h.run([
        calls(("bash", {"command": "touch first"})),                         # runs: nothing has failed yet
        calls(("read_file", {"path": "missing.txt"}),                         # fails and arms the latch...
              ("bash", {"command": "touch same_batch"})),                     # ...but this batch was already approved
        calls(("bash", {"command": "touch next_batch"})),                     # the next batch needs approval: denied
        text("stopping"),
    ], policy="on-failure")
    assert end.outcome == "Completed"
    results = h.of(ToolResultEvent)
    assert [(r.name, r.ok, r.error_category) for r in results] == [
        ("bash", True, None), ("read_file", False, "not_found"), ("bash", True, None), ("bash", False, "denied")]
    assert (h.workspace / "first").exists() and (h.workspace / "same_batch").exists()
    assert not (h.workspace / "next_batch").exists()
    assert "on-failure" in results[3].output


async def test_unknown_tool_is_reported_to_the_model_not_denied(h: Harness) -> None:
    end, provider = await h.run([calls(("frobnicate", {"x": 1})), text("ok, no such tool")], policy="deny-untrusted")
    assert end.outcome == "Completed"
    [result] = h.of(ToolResultEvent)
    assert (result.ok, result.error_category) == (False, "unknown_tool")
    assert "frobnicate" in result.output and "read_file" in result.output  # names what exists
    [sent] = [m for m in provider.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert sent.is_error and sent.name == "frobnicate"
    check_stream(h.events)


# ------------------------------------------------------------------ invalid arguments


async def test_unparseable_arguments_become_an_error_result_and_the_tool_does_not_run(h: Harness) -> None:
    broken = ToolCall(id="bad_1", name="bash", arguments={}, arguments_error="the arguments are not valid JSON (Expecting value): '{\"command\": '")
    end, provider = await h.run([calls(broken), calls(("bash", {"command": "touch fixed"})), text("ok")])
    assert end.outcome == "Completed"
    first = h.result("bad_1")
    assert (first.ok, first.error_category) == (False, "invalid_arguments")
    assert "not valid JSON" in first.output and "JSON object" in first.output
    assert (h.workspace / "fixed").exists()
    check_stream(h.events)


@pytest.mark.parametrize("args,names", [
    ({}, ["path"]),                                           # required field missing
    ({"path": "notes.txt", "offest": 3}, ["offest"]),         # a typo is refused, not ignored
    ({"path": "notes.txt", "limit": "many"}, ["limit"]),      # wrong type
    ({"path": "notes.txt", "offset": -1}, ["offset"]),        # out of range
])
async def test_arguments_that_do_not_fit_the_schema_are_an_error_result(args: dict[str, Any], names: list[str], h: Harness) -> None:
    end, _ = await h.run([calls(ToolCall(id="c1", name="read_file", arguments=args)), text("ok")])
    assert end.outcome == "Completed"
    result = h.result("c1")
    assert (result.ok, result.error_category) == (False, "invalid_arguments")
    assert "read_file" in result.output
    for name in names:
        assert name in result.output


async def test_tool_errors_carry_their_category(h: Harness) -> None:
    await h.run([calls(ToolCall(id="c1", name="read_file", arguments={"path": "/etc/passwd"}),
                       ToolCall(id="c2", name="edit_file", arguments={"path": "notes.txt", "old_string": "zeta", "new_string": "z"}),
                       ToolCall(id="c3", name="bash", arguments={"command": "exit 3"})),
                 text("ok")])
    assert h.result("c1").error_category == "outside_root"
    assert not h.result("c2").ok and h.result("c2").error_category
    assert h.result("c3").error_category == "exit_status" and "[exit code 3]" in h.result("c3").output


# ------------------------------------------------------------------ tool-result truncation


async def test_long_tool_results_are_cut_and_say_how_much_was_dropped(workspace: Path, tmp_path: Path) -> None:
    lines = [f"line {i:04d} " + "x" * 40 for i in range(200)]
    (workspace / "big.txt").write_text("\n".join(lines) + "\n")
    full = Harness(workspace, tmp_path / "home", max_result_chars=10_000_000)
    await full.run([calls(ToolCall(id="c1", name="read_file", arguments={"path": "big.txt"})), text("ok")])
    whole = full.result("c1").output
    assert full.result("c1").truncated_chars == 0 and len(whole) > 5000

    h = Harness(workspace, tmp_path / "home", max_result_chars=1000)
    _, provider = await h.run([calls(ToolCall(id="c1", name="read_file", arguments={"path": "big.txt"})), text("ok")])
    result = h.result("c1")
    assert result.ok
    assert result.truncated_chars == len(whole) - 1000
    assert f"{len(whole) - 1000} characters dropped" in result.output
    # The whole output is kept for `retrieve`, and the cut result names it on its last line.
    assert result.output.startswith(whole[:500]) and result.output.endswith(whole[-300:] + "\nretrieve handle: r1")
    assert "line 0199" in result.output and "line 0100" not in result.output
    [sent] = [m for m in provider.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert sent.content == result.output  # the model sees the cut text, not the whole


async def test_short_results_are_not_marked(h: Harness) -> None:
    await h.run([calls(ToolCall(id="c1", name="read_file", arguments={"path": "notes.txt"})), text("ok")])
    assert h.result("c1").truncated_chars == 0 and "dropped" not in h.result("c1").output


# ------------------------------------------------------------------ provider failures and timeouts


async def test_a_permanent_provider_error_ends_the_session_with_its_message(h: Harness) -> None:
    end, provider = await h.run([calls(("tree", {})), ProviderError("the API answered HTTP 401: bad key. Check the API key.", status=401)])
    assert (end.outcome, end.exit_status, end.turns) == ("Error", 1, 2)
    assert "HTTP 401" in (end.error or "")
    assert end.usage == Usage(input_tokens=10, output_tokens=5)  # usage so far is kept
    check_stream(h.events)


async def test_retryable_provider_errors_are_retried_with_notices(h: Harness) -> None:
    flaky = ProviderError("HTTP 503: busy", retryable=True, status=503)
    end, provider = await h.run([flaky, flaky, text("fine now")])
    assert end.outcome == "Completed" and end.turns == 1  # retries are one logical turn
    assert len(provider.requests) == 3
    assert sum("retrying" in n.message for n in h.of(Notice)) == 2


async def test_retries_exhausted_is_an_error(h: Harness) -> None:
    flaky = ProviderError("HTTP 503: busy", retryable=True, status=503)
    end, provider = await h.run([flaky] * 4 + [text("never")], retry=RetrySettings(max_retries=3, delays=[0.0], turn_timeout=30))
    assert (end.outcome, end.exit_status) == ("Error", 1)
    assert len(provider.requests) == 4 and "HTTP 503" in (end.error or "")


async def test_two_turn_timeouts_in_a_row_are_an_actionless_timeout(h: Harness) -> None:
    end, provider = await h.run([hang, hang, text("never")], retry=RetrySettings(turn_timeout=0.3))
    assert (end.outcome, end.exit_status) == ("ActionlessTimeout", 1)
    assert len(provider.requests) == 2
    assert "0.3 s" in (end.error or "")
    assert any("asking again" in n.message for n in h.of(Notice))
    check_stream(h.events)


async def test_a_timeout_followed_by_progress_resets_the_timeout_streak(h: Harness) -> None:
    end, _ = await h.run([hang, calls(("tree", {})), hang, text("done")], retry=RetrySettings(turn_timeout=0.3))
    assert end.outcome == "Completed"


# ------------------------------------------------------------------ cancellation


@pytest.mark.parametrize("signal,outcome,status", [(2, "Cancelled", 130), (15, "Cancelled", 143), (None, "Stopped", 0)])
async def test_cancellation_ends_the_task_with_the_outcome_of_who_cancelled(signal: int | None, outcome: str, status: int, h: Harness) -> None:
    session, provider = await h.start([calls(("tree", {}), usage=(100, 20)), hang])
    task = asyncio.create_task(session.submit("go"))
    deadline = time.monotonic() + 30
    while len(provider.requests) < 2:
        assert time.monotonic() < deadline, "the second model call never started"
        await asyncio.sleep(0.01)
    assert session.cancel(signal=signal)
    task_end = await asyncio.wait_for(task, 30)
    end = await session.close()
    assert end is not None
    assert (task_end.outcome, task_end.exit_status, task_end.error) == (outcome, status, None)
    assert (end.outcome, end.exit_status, end.error) == (outcome, status, None)
    assert end.turns == 2
    assert end.usage == Usage(input_tokens=100, output_tokens=20)  # recorded usage is preserved
    assert h.events[-1] == end
    check_stream(h.events)


async def test_cancelling_during_bash_kills_the_command(h: Harness) -> None:
    pid_file = h.workspace / "pid"
    session, _ = await h.start([calls(("bash", {"command": "echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 120"})), text("never")])
    task = asyncio.create_task(session.submit("go"))
    deadline = time.monotonic() + 30
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.01)
    pid = int(pid_file.read_text())
    session.cancel(signal=2)
    end = await asyncio.wait_for(task, 30)
    assert end.outcome == "Cancelled"
    # The interrupted call still has a result, so the conversation can go on.
    [result] = h.of(ToolResultEvent)
    assert (result.ok, result.error_category) == (False, "cancelled")
    assert isinstance(session.messages[-1], ToolResultMessage) and session.messages[-1].is_error
    await session.close()

    def alive() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:  # gone (ENOENT), or going while being read (ESRCH)
            return False

    deadline = time.monotonic() + 30
    while alive():
        assert time.monotonic() < deadline, f"the bash command (pid {pid}) survived the cancellation"
        await asyncio.sleep(0.02)


async def test_an_unexpected_exception_still_ends_the_event_stream(h: Harness) -> None:
    """A bug surfaces as itself, but JSON Lines consumers still get a session_end."""
    with pytest.raises(RuntimeError, match="boom"):
        await h.run([calls(("tree", {})), RuntimeError("boom")])
    end = h.events[-1]
    assert isinstance(end, SessionEnd)
    assert (end.outcome, end.exit_status, end.turns) == ("Error", 1, 2)
    assert isinstance(h.events[-2], TaskEnd) and "RuntimeError: boom" in (h.events[-2].error or "")
    assert "RuntimeError: boom" in (end.error or "")
    check_stream(h.events)


# ------------------------------------------------------------------ what the tools tell the model


async def test_tool_output_formatting_hints(h: Harness) -> None:
    (h.workspace / "empty.txt").write_text("")
    (h.workspace / "long.txt").write_text("".join(f"row {i}\n" for i in range(1, 51)))
    await h.run([calls(
        ToolCall(id="empty", name="read_file", arguments={"path": "empty.txt"}),
        ToolCall(id="page", name="read_file", arguments={"path": "long.txt", "offset": 11, "limit": 10}),
        ToolCall(id="nofind", name="find_files", arguments={"pattern": "*.rs"}),
        ToolCall(id="nogrep", name="grep", arguments={"pattern": "zzz_absent"}),
        ToolCall(id="ls", name="list_directory", arguments={}),
        ToolCall(id="tree", name="tree", arguments={}),
    ), text("ok")])
    assert h.result("empty").output == "empty.txt is empty."
    page = h.result("page").output
    assert "row 11" in page and "row 20" in page and "row 21" not in page
    assert "lines 11-20 of 50" in page and "offset=21" in page
    assert h.result("nofind").output == "No files match '*.rs'."
    assert h.result("nogrep").output == "No matches for 'zzz_absent'."
    assert "notes.txt  (17 bytes)" in h.result("ls").output
    assert "files]" in h.result("tree").output
    assert all(r.ok for r in h.of(ToolResultEvent))


async def test_an_unreachable_tool_service_is_an_error_result_not_a_crash(h: Harness, tmp_path: Path) -> None:
    from osprey.toolservice.client import ToolClient

    dead = ToolClient.for_socket(str(tmp_path / "nobody-listens.sock"), token="x")
    session, _ = await h.start([calls(ToolCall(id="c1", name="read_file", arguments={"path": "notes.txt"})), text("the tools are down")])
    try:
        assert session.loop is not None
        session.loop.calls.context.client = dead
        await session.submit("go")
        end = await session.close()
    finally:
        await dead.close()
    assert end is not None
    assert end.outcome == "Completed"
    result = h.result("c1")
    assert (result.ok, result.error_category) == (False, "tool_service_unavailable")
    assert "unreachable" in result.output
