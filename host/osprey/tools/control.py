"""The loop's control tools: `todo_write` (the model's task list), `task_status` (declared
completion) and `question` (ask the person).

None of them touches the workspace: they are read-only and trusted, so no approval policy ever asks
for them. Each reports what it did as a session event (`TodoList`, `TaskStatus`, `Question`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..events import Event, Question, TaskStatus, TodoList
from .base import Invocation, Tool, ToolContext, ToolOutcome

if TYPE_CHECKING:
    from .inputs import QuestionInput, TaskStatusInput, TodoItem, TodoWriteInput

MAX_TODO_ITEMS = 100
MAX_TODO_CHARS = 500
MAX_SUMMARY_CHARS = 4000
MAX_QUESTION_CHARS = 2000
# An answer longer than this is cut before the model sees it (a paste of a whole file).
MAX_ANSWER_CHARS = 8000

NO_ONE_TO_ASK = (
    "Error (not_interactive): no one can be asked in this run (it is headless), and asking again will not change that. "
    "Decide yourself: choose the most reasonable option, say in your final answer which one you chose and why, and go on."
)
NOT_ANSWERED = (
    "The person closed the question without answering. Do not ask the same question again: decide yourself, "
    "say which option you chose and why, and go on."
)

Ask = Callable[[str], Awaitable["str | None"]]


def _counts(items: list[TodoItem]) -> str:
    done = sum(i.status == "completed" for i in items)
    working = sum(i.status == "in_progress" for i in items)
    pending = len(items) - done - working
    return f"{len(items)} items: {done} completed, {working} in progress, {pending} pending"


def control_tools(
    *,
    emit: Callable[[Event], None],
    ask: Ask | None,
    on_status: Callable[[str, str], None],
    turn: Callable[[], int],
) -> list[Tool]:
    """`todo_write`, `task_status` and `question`.

    `emit` sends their events (the session's emit); `ask` puts a question in front of the person and
    returns the answer, or None when they closed it (None itself: headless, no one to ask);
    `on_status(status, summary)` is told of every `task_status` call (the loop treats it as a
    completion candidate); `turn()` is the current turn number, for the events."""
    asking = asyncio.Lock()  # one question in front of the person at a time

    async def todo_write(call: Invocation, ctx: ToolContext) -> str:
        a: TodoWriteInput = call.input
        items = [{"content": i.content, "status": i.status} for i in a.todos]
        emit(TodoList(turn=turn(), items=items))
        if not a.todos:
            return "Todo list cleared."
        now = next((i.content for i in a.todos if i.status == "in_progress"), None)
        return f"Todo list updated ({_counts(a.todos)})." + (f" In progress: {now}" if now else "")

    async def task_status(call: Invocation, ctx: ToolContext) -> str:
        a: TaskStatusInput = call.input
        emit(TaskStatus(turn=turn(), status=a.status, summary=a.summary))
        on_status(a.status, a.summary)
        if a.status == "done":
            return "Recorded: done. Osprey checks the completion against the verification checkpoint; if anything is open you will be told what."
        return "Recorded: blocked. Osprey hands the task back with your summary."

    async def question(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        a: QuestionInput = call.input
        if ask is None:
            emit(Question(turn=turn(), question=a.question, answer=None))
            return ToolOutcome(NO_ONE_TO_ASK, True, "not_interactive")
        async with asking:
            answer = await ask(a.question)
        if answer is not None:
            answer = answer.strip()[:MAX_ANSWER_CHARS]
        emit(Question(turn=turn(), question=a.question, answer=answer))
        if answer is None:
            return ToolOutcome(NOT_ANSWERED)
        return ToolOutcome(f"The person answered: {answer}" if answer else "The person answered with an empty reply.")

    return [
        Tool.stored(
            "todo_write",
            "Write your task list for this task (the whole list each time; it replaces the previous one). Use it for work of "
            "three or more steps: keep exactly one item in_progress while you work on it and mark items completed as you finish.",
            "osprey.tools.inputs.TodoWriteInput", todo_write, read_only=True, trusted=True,
        ),
        Tool.stored(
            "task_status",
            "Declare the task done (finished and verified) or blocked (you cannot go on without help), with a summary. "
            "A declaration does not clear failing verification: fix and re-run failing checks first.",
            "osprey.tools.inputs.TaskStatusInput", task_status, read_only=True, trusted=True,
        ),
        Tool.stored(
            "question",
            "Ask the person one question when you cannot decide yourself (a real ambiguity, a choice only they can make). "
            "In a headless run no one can answer: you must decide.",
            "osprey.tools.inputs.QuestionInput", question, read_only=True, trusted=True,
        ),
    ]
