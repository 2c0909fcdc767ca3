"""The presenter: what the terminal UI shows of a session's typed events.

One presenter serves the live session (its events as they are emitted, its streamed text and its
commands' live output) and a journaled one being resumed (its recorded events, read back typed),
so a session looks the same watched or replayed. It keeps the transcript (/export, /copy) and what
the status line says of the session (model, tokens, cost, task list, turns).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from textual.widget import AwaitMount, Widget

from .. import workspace_diff
from ..catalog import ModelInfo, estimated_cost
from ..events import (
    Advisory,
    AssistantText,
    Compaction,
    Event,
    ModelSwitch,
    Notice,
    PersonaSwitch,
    Question,
    SessionStart,
    TaskEnd,
    TaskStatus,
    TodoList,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    UserMessageEvent,
    Verification,
)
from ..terminal_text import StreamCleaner, clean
from .children import RunningChildren
from .transcript import Transcript, call_line, format_arguments, image_lines, question_markdown, result_mark, result_text, todo_markdown
from .widgets import MAX_RESULT_SHOWN, AnswerRow, FoldRow, NoticeRow, QuestionRow, ToolRow, UserRow, diff_text, todo_progress

# `/diff` runs this through the session as a call the person asked for; its result is shown as the diff.
DIFF_COMMAND = workspace_diff.COMMAND


def status_line(*, provider: str, model: str, policy: str, home: str, input_tokens: int, output_tokens: int, state: str, cost: float | None = None,
                todo: tuple[int, int] | None = None, persona: str | None = None) -> str:
    """`todo`: (completed, all) of the model's task list, when it has one; `persona`: the session's, when it has one."""
    spent = f" · ≈${cost:.4f}" if cost is not None else ""
    tasks = f" · todo {todo[0]}/{todo[1]}" if todo is not None and todo[1] else ""
    who = f"{persona} · " if persona else ""
    return f"{who}{provider} · {model} · {policy} · {home} · tokens {input_tokens:,} in / {output_tokens:,} out{spent}{tasks} · {state}"


def welcome(start: SessionStart) -> str:
    """The first screen's note: how to start, and what the session runs with."""
    return (f"Osprey is ready: {start.provider} · {start.model}, approval policy {start.approval_policy}, tools on {start.tool_service}.\n"
            "Type a task and press Enter (Shift+Enter adds a line); /help lists the commands, /model switches the model.\n"
            "Esc stops a task · Tab reaches the tool rows, Enter opens one · PageUp/PageDown scroll · Ctrl+C twice quits.")


class View(Protocol):
    """What the presenter needs of the screen."""

    @property
    def gone(self) -> bool:
        """The screen is being torn down: rows go to the transcript only."""
        ...

    def mount_rows(self, rows: Sequence[Widget]) -> AwaitMount:
        """Add rows at the end of the conversation."""
        ...

    async def clear_rows(self) -> None:
        """Take every row off the conversation."""
        ...

    def show_todo(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Show the model's task list as it stands (empty: hide it)."""
        ...

    def refresh_status(self) -> None:
        """Redraw the status line."""
        ...

    def model_info(self, provider: str, model: str) -> ModelInfo | None:
        """The model's catalog entry (its prices), when it is known without the network."""
        ...

    def late_note(self, text: str) -> None:
        """A warning or an error that came after the screen was gone (printed once the terminal is back)."""
        ...


def is_diff(call: ToolCallEvent) -> bool:
    """Whether a call the person asked for is `/diff`'s."""
    return call.name == "bash" and call.arguments.get("command") == DIFF_COMMAND


def bash_output(text: str) -> tuple[str, int | None]:
    """A `bash` result split into the command's output and its exit code (None when the result
    has no `[exit code N]` line: it timed out, was killed, or was refused)."""
    at = text.rfind("[exit code ")  # the tool puts its status after the output
    if at < 0 or (at > 0 and text[at - 1] != "\n"):
        return text, None
    end = text.find("]", at)
    try:
        code = int(text[at + len("[exit code "):end])
    except ValueError:
        return text, None
    return text[:max(at - 1, 0)], code


class Presenter:
    """Turns typed events into rows of the conversation, notes, the task list and the status line."""

    def __init__(self, screen: View) -> None:
        self.screen = screen
        self.debug = False  # raw events are shown too (/debug)
        self.children = RunningChildren()  # the running child agents, as their events tell
        self._reset()

    def _reset(self) -> None:
        self.children.clear()
        self.transcript = Transcript()
        self.start: SessionStart | None = None  # the session as it started, with the model it talks to now
        self.effort: str | None = None
        self.tokens = (0, 0)
        self.turns = 0  # the highest turn of the session's events
        self.cost: float | None = None
        self.todo: tuple[int, int] | None = None  # (completed, all) of the model's task list
        self._todo_items: list[dict[str, Any]] = []
        self._price: ModelInfo | None = None
        self._objections: list[str] = []  # the verification objections last shown
        self._tool_rows: dict[str, ToolRow] = {}  # the model's calls still running
        self._asked: dict[str, ToolCallEvent] = {}  # calls the person ran (/diff), until their result
        self._echoed: str | None = None  # the prompt shown as it was sent: its user_message is not shown again
        self._batch: list[Widget] | None = None  # rows of a replay, mounted together
        self._answer: AnswerRow | None = None
        self._answer_text: list[str] = []
        self._answer_cleaner = StreamCleaner()  # the answer's pieces are cleaned as they come
        self._chunks: asyncio.Queue[str | None] | None = None
        self._pump: asyncio.Task[None] | None = None

    async def clear(self) -> None:
        """Forget the session shown (for the next one): its rows, transcript, task list and status."""
        await self.end_answer()
        self._reset()
        if not self.screen.gone:
            await self.screen.clear_rows()
        self.screen.show_todo([])
        self.screen.refresh_status()

    # ------------------------------------------------------------------ what is shown

    def _show(self, *rows: Widget) -> AwaitMount | None:
        if self._batch is not None:
            self._batch.extend(rows)
            return None
        if self.screen.gone:
            return None
        return self.screen.mount_rows(rows)

    def busy_rows(self) -> set[int]:
        """The ids of the rows still being written (running calls, the answer streaming in)."""
        return {id(row) for row in self._tool_rows.values()} | ({id(self._answer)} if self._answer is not None else set())

    def note(self, text: str, level: str = "info") -> None:
        """A line in the conversation: `info`, `warning`, `error` or `done`."""
        text = clean(text)  # it may quote a model, a tool, a file or a server
        self.transcript.add("notice", text)
        if self._batch is None and self.screen.gone:
            if level in ("warning", "error"):
                self.screen.late_note(text)
            return
        self._show(NoticeRow(text, markup=False, classes=level))

    def prompt(self, text: str) -> AwaitMount | None:
        """The person's prompt, shown as it is sent (its `user_message` comes once the session has taken it)."""
        entry = self.transcript.add("user", text)
        self._echoed = text
        return self._show(UserRow(text, entry.at))

    def status(self, state: str) -> str:
        """The status line: the session's model, policy, home, tokens, cost and task list, and `state`."""
        start = self.start
        if start is None:
            return state
        model = start.model + (f" ({self.effort} effort)" if self.effort else "")
        # The model's name may come from a server's catalog or a project's configuration.
        return clean(status_line(provider=start.provider, model=model, policy=start.approval_policy, home=start.tool_service,
                                 input_tokens=self.tokens[0], output_tokens=self.tokens[1], state=state, cost=self.cost, todo=self.todo,
                                 persona=start.persona))

    async def replay(self, events: Sequence[Event], heading: str) -> None:
        """Show a journaled session's events, under `heading`, as they were shown live."""
        self._batch = [NoticeRow(heading, markup=False)]
        try:
            for event in events:
                self.present(event)
        finally:
            rows, self._batch = self._batch, None
            # A call the record does not finish (the session was killed while it ran) stays as it was.
            self._tool_rows.clear()
            self._asked.clear()
            self._echoed = None
        self.screen.show_todo(self._todo_items)  # the task list as the session left it
        self.screen.refresh_status()
        if not self.screen.gone:
            await self.screen.mount_rows(rows)

    # ------------------------------------------------------------------ events

    def present(self, event: Event) -> None:
        """Show one event of the session, live or replayed."""
        if self.debug:
            fields = event.model_dump(mode="json", exclude={"type"})
            self._show(FoldRow(f"event {event.type}", format_arguments(fields)[:MAX_RESULT_SHOWN], classes="debug"))
        if event.agent_id is not None:
            self.children.update(event)  # a child session's: the running children's panel shows it
            return
        turn = getattr(event, "turn", None)
        if isinstance(turn, int):
            self.turns = max(self.turns, turn)
        at = datetime.fromtimestamp(event.ts, UTC)
        match event:
            case SessionStart():
                self.start, self.effort = event, event.effort
                self._priced(event.provider, event.model, reset=True)
                if self._batch is None and not any(entry.role == "user" for entry in self.transcript.entries):
                    self._show(NoticeRow(welcome(event), classes="welcome"))
            case UserMessageEvent(origin="loop"):
                self.note(f"(to the model) {event.text}")
            case UserMessageEvent():
                if self._echoed is not None and event.text.startswith(self._echoed):  # the prompt, with any context hooks added
                    self._echoed = None
                else:
                    entry = self.transcript.add("user", event.text, at)
                    self._show(UserRow(entry.text, entry.at))
            case AssistantText():
                if self._chunks is None and event.text:  # not streamed: shown whole
                    entry = self.transcript.add("assistant", event.text, at)
                    self._show(AnswerRow(entry.at, entry.text))
                self._finish_answer()
            case ToolCallEvent():
                self._finish_answer()
                if event.requested_by == "user":
                    self._asked[event.id] = event
                    return
                row = self._tool_rows[event.id] = ToolRow(event)
                self.transcript.add("tool", f"{event.name}\n{format_arguments(event.arguments)}", at, call=call_line(event.name, event.arguments))
                self._show(row)
            case ToolResultEvent():
                if event.requested_by == "user":
                    self._user_result(self._asked.pop(event.id, None), event, at)
                    return
                finished = self._tool_rows.pop(event.id, None)
                if finished is not None:
                    finished.finish(event)
                self.transcript.add("tool", f"{event.name} -> {result_mark(event)}\n{result_text(event.output)}{image_lines(event)}", at)
            case UsageEvent():
                self.tokens = (event.total.input_tokens, event.total.output_tokens)
                turn_cost = estimated_cost(event.usage.input_tokens, event.usage.output_tokens, self._price)
                self.cost = None if turn_cost is None or self.cost is None else self.cost + turn_cost
                self._refresh()
            case ModelSwitch():
                if self.start is not None:
                    self.start = self.start.model_copy(update={"provider": event.provider, "model": event.model})
                self.effort = event.effort
                self._priced(event.provider, event.model, reset=False)
                self.note(f"now talking to {event.provider} · {event.model}" + (f" (effort {event.effort})" if event.effort else ""))
            case PersonaSwitch():
                if self.start is not None:
                    self.start = self.start.model_copy(update={"persona": event.persona})
                self._refresh()
            case Compaction():
                self._finish_answer()
                self.transcript.add("notice", f"conversation compacted ({event.reason}): {event.summary}", at)
                self._show(FoldRow(f"conversation compacted ({event.reason}, {event.messages_before} messages)", event.summary, classes="compaction"))
            case Notice():
                self.note(event.message, event.level)
            case TodoList():
                self.transcript.add("todo", todo_markdown(event.items), at)
                self._show_todo(event.items)
            case Question():
                entry = self.transcript.add("question", question_markdown(event.question, event.answer), at)
                self._show(QuestionRow(event, entry.at))
            case Advisory():
                self.note(f"advisory ({event.detector.replace('_', ' ')}): {event.message}", "warning")
            case TaskStatus():
                self.note(f"task {event.status}: {event.summary}", "done" if event.status == "done" else "warning")
            case Verification():
                # Every change of the checkpoint is recorded; the person is shown its objections, when they change.
                if event.objections and event.objections != self._objections:
                    self.note("verification objections still open:\n" + "\n".join(f"- {o}" for o in event.objections), "warning")
                self._objections = list(event.objections)
            case TaskEnd():
                self._finish_answer()
                self._echoed = None  # a prompt blocked before it reached the conversation has no user_message
                if event.outcome != "Completed":
                    self.note(f"{event.outcome}" + (f": {event.error}" if event.error else ""), "warning")

    def _priced(self, provider: str, model: str, *, reset: bool) -> None:
        """Prices for the model now talked to; the cost so far is dropped when they are unknown."""
        self._price = self.screen.model_info(provider, model)
        known = self._price is not None and self._price.input_price is not None
        if reset:
            self.cost = 0.0 if known else None
        elif not known:
            self.cost = None  # the new model's prices are unknown: no honest total any more
        self._refresh()

    def _refresh(self) -> None:
        if self._batch is None:  # a replay redraws the status line once, at its end
            self.screen.refresh_status()

    def _show_todo(self, items: list[dict[str, Any]]) -> None:
        self.todo = todo_progress(items) if items else None
        self._todo_items = items
        if self._batch is None:
            self.screen.show_todo(items)
            self.screen.refresh_status()

    def _user_result(self, call: ToolCallEvent | None, result: ToolResultEvent, at: datetime) -> None:
        """A call the person ran: `/diff`'s is shown as the diff, any other as a finished tool row."""
        if call is not None and is_diff(call):
            self._diff(result, at)
            return
        call = call or ToolCallEvent(turn=result.turn, id=result.id, name=result.name, arguments={}, requested_by="user")
        row = ToolRow(call)
        row.finish(result)
        self.transcript.add("tool", f"{call.name} (run by you)\n{format_arguments(call.arguments)}\n{result_text(result.output)}", at,
                            call=call_line(call.name, call.arguments) + " (run by you)")
        self._show(row)

    def _diff(self, result: ToolResultEvent, at: datetime) -> None:
        output, code = bash_output(result.output)
        view = workspace_diff.read(output, exit_code=code, ok=result.ok, error_category=result.error_category,
                                   truncated_chars=result.truncated_chars)
        if view.note:
            self.note(view.note, view.level)
            return
        self.transcript.add("tool", f"{view.title}\n{view.body}", at, call=f"/diff: {view.title}")
        self._show(FoldRow(view.title, diff_text(view.body), collapsed=False, classes="diff"))

    # ------------------------------------------------------------------ live text and output

    def text(self, chunk: str) -> None:
        """A piece of the model's answer as it streams in."""
        if self._chunks is None:
            entry = self.transcript.add("assistant", "")
            self._answer = AnswerRow(entry.at)
            self._answer_text = []
            self._answer_cleaner = StreamCleaner()
            self._chunks = asyncio.Queue()
            mounted = self._show(self._answer)  # now, so the answer stays above the calls that follow it
            self._pump = asyncio.ensure_future(self._stream(self._answer, self._chunks, mounted))
        chunk = self._answer_cleaner.feed(chunk)
        if chunk:
            self._answer_text.append(chunk)
            self._chunks.put_nowait(chunk)

    async def _stream(self, row: AnswerRow, chunks: asyncio.Queue[str | None], mounted: AwaitMount | None) -> None:
        if mounted is None:
            return
        await mounted
        stream = type(row.markdown).get_stream(row.markdown)
        try:
            while (chunk := await chunks.get()) is not None:
                await stream.write(chunk)
        finally:
            await stream.stop()

    def _finish_answer(self) -> None:
        if self._chunks is not None:
            rest = self._answer_cleaner.end()
            if rest:
                self._answer_text.append(rest)
                self._chunks.put_nowait(rest)
            self._chunks.put_nowait(None)
            for entry in reversed(self.transcript.entries):
                if entry.role == "assistant":
                    entry.text = "".join(self._answer_text)
                    break
        self._chunks = None
        self._answer = None

    async def end_answer(self) -> None:
        """Finish the streamed answer and wait until it is all on the screen."""
        self._finish_answer()
        pump, self._pump = self._pump, None
        if pump is not None:
            await pump

    def tool_output(self, call_id: str, chunk: bytes) -> None:
        """Live output of a running call (bash)."""
        row = self._tool_rows.get(call_id)
        if row is not None:
            row.add_output(chunk)
