"""The loop's control tools (`todo_write`, `task_status`, `question`) driven through the session
core: their validation, their events, and that no approval policy ever asks for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness, calls, check_stream, text

from osprey.events import Question, TaskStatus, TodoList, ToolResultEvent
from osprey.policy.approvals import ApprovalAnswer, ApprovalRequest
from osprey.tools.control import MAX_TODO_CHARS, MAX_TODO_ITEMS, NO_ONE_TO_ASK, control_tools


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path)


class RecordingApprover:
    """A person who answers every approval prompt with a denial, and remembers being asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request.tool)
        return ApprovalAnswer(decision="deny", reason="not now")


async def run(harness: Harness, script: list[Any], *, ask: Any = None, policy: str = "never", approver: Any = None) -> list[tuple[str, str]]:
    statuses: list[tuple[str, str]] = []
    session, _ = await harness.start(script, policy=policy, approver=approver)
    assert session.registry is not None and session.loop is not None
    loop = session.loop
    for tool in control_tools(emit=session.emit, ask=ask, on_status=lambda s, t: statuses.append((s, t)), turn=lambda: loop.turns):
        session.registry.add(tool)
    try:
        await session.submit("Do the task.")
    finally:
        await session.close()
    check_stream(harness.events)
    return statuses


def results(harness: Harness) -> list[ToolResultEvent]:
    return harness.of(ToolResultEvent)


async def test_todo_write_emits_the_whole_list_and_confirms_it(harness: Harness) -> None:
    items = [{"content": "read the code", "status": "completed"}, {"content": "fix the bug", "status": "in_progress"},
             {"content": "run the tests", "status": "pending"}]
    await run(harness, [calls(("todo_write", {"todos": items})), calls(("todo_write", {"todos": []})), text("done")])
    first, cleared = harness.of(TodoList)
    assert first.items == items and first.turn == 1
    assert cleared.items == [] and cleared.turn == 2
    ok, empty = results(harness)
    assert ok.ok and ok.output == "Todo list updated (3 items: 1 completed, 1 in progress, 1 pending). In progress: fix the bug"
    assert empty.ok and empty.output == "Todo list cleared."


@pytest.mark.parametrize(("todos", "problem"), [
    ([{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}], "2 items are in_progress"),
    ([{"content": "x", "status": "pending"}] * (MAX_TODO_ITEMS + 1), f"at most {MAX_TODO_ITEMS} items"),
    ([{"content": "x" * (MAX_TODO_CHARS + 1), "status": "pending"}], f"at most {MAX_TODO_CHARS} characters"),
    ([{"content": "", "status": "pending"}], "at least 1 character"),
    ([{"content": "   ", "status": "pending"}], "content is blank"),
    ([{"content": "a", "status": "started"}], "'pending', 'in_progress' or 'completed'"),
    ([{"content": "a", "status": "pending", "owner": "me"}], "Extra inputs are not permitted"),
])
async def test_todo_write_refuses_an_invalid_list_without_emitting_it(harness: Harness, todos: list[dict[str, str]], problem: str) -> None:
    await run(harness, [calls(("todo_write", {"todos": todos})), text("done")])
    [result] = results(harness)
    assert not result.ok and result.error_category == "invalid_arguments"
    assert problem in result.output
    assert harness.of(TodoList) == []


async def test_task_status_emits_and_tells_the_loop(harness: Harness) -> None:
    statuses = await run(harness, [
        calls(("task_status", {"status": "done", "summary": "  fixed the parser; pytest passes  "})),
        calls(("task_status", {"status": "blocked", "summary": "need the API key"})),
        calls(("task_status", {"status": "finished", "summary": "x"})),
        calls(("task_status", {"status": "done", "summary": " "})),
        calls(("task_status", {"status": "done", "summary": "x" * 4001})),
        text("ok"),
    ])
    assert statuses == [("done", "fixed the parser; pytest passes"), ("blocked", "need the API key")]
    assert [(e.turn, e.status, e.summary) for e in harness.of(TaskStatus)] == [(1, "done", "fixed the parser; pytest passes"), (2, "blocked", "need the API key")]
    done, blocked, wrong, blank, long = results(harness)
    assert done.ok and "Recorded: done" in done.output
    assert blocked.ok and "Recorded: blocked" in blocked.output
    assert [r.error_category for r in (wrong, blank, long)] == ["invalid_arguments"] * 3
    assert "'done' or 'blocked'" in wrong.output and "summary is blank" in blank.output and "at most 4000 characters" in long.output


async def test_question_headless_says_no_one_can_be_asked(harness: Harness) -> None:
    await run(harness, [calls(("question", {"question": "tabs or spaces?"})), text("spaces, then")])
    [result] = results(harness)
    assert not result.ok and result.error_category == "not_interactive"
    assert result.output == NO_ONE_TO_ASK and "Decide yourself" in result.output
    [asked] = harness.of(Question)
    assert (asked.question, asked.answer, asked.turn) == ("tabs or spaces?", None, 1)


async def test_question_asks_the_person_one_at_a_time_and_returns_the_answer(harness: Harness) -> None:
    import asyncio

    asked: list[str] = []
    at_once = 0
    most = 0

    async def ask(question: str) -> str | None:
        nonlocal at_once, most
        at_once += 1
        most = max(most, at_once)
        asked.append(question)
        await asyncio.sleep(0)
        at_once -= 1
        return None if "skip" in question else f"  answer to {question}  "

    await run(harness, [calls(("question", {"question": "tabs?"}), ("question", {"question": "skip this?"})), text("ok")], ask=ask)
    assert asked == ["tabs?", "skip this?"] and most == 1
    answered, skipped = results(harness)
    assert answered.ok and answered.output == "The person answered: answer to tabs?"
    assert skipped.ok and "closed the question without answering" in skipped.output
    assert [(q.question, q.answer) for q in harness.of(Question)] == [("tabs?", "answer to tabs?"), ("skip this?", None)]


async def test_question_refuses_a_blank_question(harness: Harness) -> None:
    async def ask(question: str) -> str | None:
        raise AssertionError("a blank question is never shown")

    await run(harness, [calls(("question", {"question": "  "})), text("ok")], ask=ask)
    [result] = results(harness)
    assert result.error_category == "invalid_arguments" and "question is blank" in result.output
    assert harness.of(Question) == []


@pytest.mark.parametrize("policy", ["on-request", "on-failure", "unless-trusted", "deny-untrusted"])
async def test_no_approval_policy_asks_for_the_control_tools(harness: Harness, policy: str) -> None:
    person = RecordingApprover()

    async def ask(question: str) -> str | None:
        return "yes"

    await run(harness, [
        calls(("todo_write", {"todos": [{"content": "a", "status": "pending"}]}), ("task_status", {"status": "done", "summary": "s"}),
              ("question", {"question": "ok?"})),
        calls(("write_file", {"path": "x.txt", "content": "x"})),  # a tool that does need approval, for contrast
        text("done"),
    ], ask=ask, policy=policy, approver=person)
    todo, status, question, write = results(harness)
    assert todo.ok and status.ok and question.ok
    if policy == "on-failure":  # nothing failed, so nothing asks
        assert write.ok and person.asked == []
    else:
        assert not write.ok and write.error_category == "denied"
        assert person.asked == ([] if policy == "deny-untrusted" else ["write_file"])
    for tool in control_tools(emit=lambda e: None, ask=None, on_status=lambda s, t: None, turn=lambda: 0):
        assert tool.read_only and tool.trusted
