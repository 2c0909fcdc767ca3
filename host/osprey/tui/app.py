"""`OspreyApp`: renders a session's events and drives it through `start`, `submit`, `cancel`, `close`.

The app builds nothing of the session itself: a factory given the app's callbacks returns a
`Session` (the CLI builds one from the settings; tests pass a scripted provider)."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.widget import AwaitMount, Widget
from textual.widgets import Markdown, Static

from ..catalog import Catalog, ModelInfo, estimated_cost, initial_catalog
from ..config import Settings
from ..errors import OspreyError
from ..events import (
    Advisory,
    AssistantText,
    Compaction,
    Event,
    ModelSwitch,
    Notice,
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
from ..policy.approvals import ApprovalAnswer, ApprovalRequest
from ..session.core import Session
from ..sessions.journal import SessionRow, find_session, list_sessions, load_events
from . import commands
from .approval_screen import ApprovalScreen
from .approver import TuiApprover
from .asker import TuiAsker
from .completion import CompletionMenu, needs_argument
from .question_screen import QuestionScreen
from .screens import ModelPicker, SessionsScreen
from .transcript import Transcript, format_arguments, question_markdown, todo_markdown
from .widgets import (
    MAX_RESULT_SHOWN,
    AnswerRow,
    FoldRow,
    NoticeRow,
    PromptArea,
    QuestionRow,
    TodoPanel,
    ToolRow,
    UserRow,
    diff_text,
    todo_progress,
)

EFFORT_LEVELS = ("minimal", "low", "medium", "high")
PROVIDER_NAMES = ("openai", "anthropic")
MAX_DIFF_BYTES = 200_000
MAX_ROWS = 300  # conversation rows kept on the screen
DIFF_COMMAND = "git --no-pager diff --stat --no-color && echo && git --no-pager diff --no-color"


@dataclass
class Resume:
    """A journaled session to go on with: its row and its recorded events."""

    row: SessionRow
    events: list[dict[str, Any]]


@dataclass
class Hooks:
    """What the app gives the session it drives."""

    emit: Callable[[Event], None]
    approver: TuiApprover
    on_text: Callable[[str], None]
    on_tool_output: Callable[[str, bytes], None]
    progress: Callable[[str], None]
    warn: Callable[[str], None]
    resume: Resume | None = None  # go on with this journaled session (its id, its conversation)
    ask: Callable[[str], Awaitable[str | None]] | None = None  # the model's questions to the person (`question`)

    def kwargs(self) -> dict[str, Any]:
        return {"emit": self.emit, "approver": self.approver, "on_text": self.on_text, "on_tool_output": self.on_tool_output,
                "progress": self.progress, "warn": self.warn, "ask": self.ask}


SessionFactory = Callable[[Hooks], Session]
# Settings for a model switch: the launch flags with these (provider, model, effort) put over them.
SettingsFor = Callable[[dict[str, Any]], Settings]
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def status_line(*, provider: str, model: str, policy: str, home: str, input_tokens: int, output_tokens: int, state: str, cost: float | None = None,
                todo: tuple[int, int] | None = None) -> str:
    """`todo`: (completed, all) of the model's task list, when it has one."""
    spent = f" · ≈${cost:.4f}" if cost is not None else ""
    tasks = f" · todo {todo[0]}/{todo[1]}" if todo is not None and todo[1] else ""
    return f"{provider} · {model} · {policy} · {home} · tokens {input_tokens:,} in / {output_tokens:,} out{spent}{tasks} · {state}"


class OspreyApp(App[int]):
    CSS = """
    #conversation { height: 1fr; padding: 0 1; }
    #status { height: 1; background: $panel; color: $text; padding: 0 1; }
    .-timestamps Stamp { display: block; }
    """
    BINDINGS = [
        Binding("escape", "stop", "stop the task"),
        Binding("ctrl+c", "quit", "quit", priority=True),
        Binding("ctrl+q", "quit", "quit", priority=True),
        # The slash-command menu, while it is open under the prompt (see check_action).
        Binding("up", "menu_move(-1)", show=False, priority=True),
        Binding("down", "menu_move(1)", show=False, priority=True),
        Binding("tab", "menu_take", show=False, priority=True),
        Binding("enter", "menu_enter", show=False, priority=True),
        Binding("escape", "menu_close", show=False, priority=True),
    ]
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, factory: SessionFactory, *, title: str = "osprey", warnings: Sequence[str] = (),
                 settings_for: SettingsFor | None = None, journal: Path | None = None, resume: Resume | None = None,
                 catalog: Catalog | None = None, trace: Callable[[str], None] | None = None,
                 on_terminal: Callable[[], None] | None = None, close_on_exit: bool = True,
                 model_flags: dict[str, Any] | None = None) -> None:
        """`catalog`: the model capabilities read at launch; `trace` records the launch steps;
        `on_terminal` runs once the terminal is set up (the launcher installs its crash guard);
        `close_on_exit=False` leaves closing the session to the caller (`teardown()`), after
        the terminal is restored."""
        super().__init__()
        self.factory = factory
        self.settings_for = settings_for
        self.journal = journal  # the session journal, for /session and /sessions
        self._resume_next = resume
        self.catalog = catalog
        self.trace = trace or (lambda _: None)
        self.on_terminal = on_terminal
        self.close_on_exit = close_on_exit
        self._shut_down = False
        self._hidden = 0  # rows taken off the screen in a long conversation
        self.late_notes: list[str] = []  # warnings and errors that came after the screen was gone
        self.model_flags: dict[str, Any] = dict(model_flags or {})  # what /model, /provider and /effort chose, kept across /new
        self.current_settings: Settings | None = None  # the settings of the last switch, for the next session
        self.debug_events = False
        self.warnings = list(warnings)  # from loading the settings: shown first
        self.title = title
        self.session: Session | None = None
        self.approver = TuiApprover(self._show_approval)
        self.asker = TuiAsker(self._show_question)
        self.transcript = Transcript()
        self.crash: BaseException | None = None
        self.start_error: str | None = None  # why the last session did not start
        self.exit_status = 0
        self._answer: AnswerRow | None = None
        self._answer_text: list[str] = []
        self._chunks: asyncio.Queue[str | None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._tool_rows: dict[str, ToolRow] = {}
        self._todo: tuple[int, int] | None = None  # (completed, all) of the model's task list
        self._objections: list[str] = []  # the verification objections last shown
        self._state = "starting"
        self._start: SessionStart | None = None
        self._tokens = (0, 0)
        self._ui_thread = threading.get_ident()
        self._price: ModelInfo | None = None
        self._cost: float | None = None
        self._effort: str | None = None
        self._quitting = False
        self._unmounting = False
        self._signals: list[int] = []
        self._working = False
        self.task_done = asyncio.Event()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="conversation")
        yield TodoPanel(id="todo")
        yield CompletionMenu(id="suggestions")
        yield Static("starting…", id="status", markup=False)
        yield PromptArea(id="prompt")

    async def on_mount(self) -> None:
        self.trace("terminal")
        if self.on_terminal is not None:
            self.on_terminal()
        self._ui_thread = threading.get_ident()
        self.query_one("#conversation", VerticalScroll).anchor()
        self.query_one(PromptArea).focus()
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            try:
                loop.add_signal_handler(signum, self._on_signal, signum)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
                continue
            self._signals.append(signum)
        for warning in self.warnings:
            self._note(f"warning: {warning}", "warning")
        # The first session starts before the event loop takes keys; one that cannot start
        # (the dispatcher, the tools) stops the TUI, and the launcher prints why.
        await self._open_session()
        if self.start_error is not None and not self._quitting:
            self._quitting = True
            self.exit(1)

    def on_ready(self) -> None:
        self.trace("event_loop")

    def _on_signal(self, signum: int) -> None:
        # SIGTERM or SIGHUP (a closed terminal): leave in order, as /quit does, with 128 + the signal.
        if not self._quitting:
            self.exit_status = 128 + signum
            self.run_worker(self.action_quit(), group="quit")

    @property
    def conversation(self) -> VerticalScroll:
        return self.query_one("#conversation", VerticalScroll)

    @property
    def _gone(self) -> bool:
        """The screen is being torn down: events go to the transcript only."""
        if self._unmounting:
            return True
        try:
            return not self.conversation.is_attached
        except NoMatches:
            return True

    def _model_info(self, provider: str, model: str) -> ModelInfo | None:
        """The model's catalog entry (prices, context window) from the cache; no network."""
        if self.catalog is not None and (found := self.catalog.find(provider, model)) is not None:
            return found
        session = self.session
        if session is None:
            return None
        try:
            return initial_catalog(session.settings.home, provider, session.settings.base_url, model).find(provider, model)
        except Exception:  # noqa: BLE001 - a cache problem only costs the price display
            return None

    def _refresh_status(self) -> None:
        if self._gone:
            return
        start = self._start
        if start is None:
            text = self._state
        else:
            model = start.model + (f" ({self._effort} effort)" if self._effort else "")
            text = status_line(provider=start.provider, model=model, policy=start.approval_policy, home=start.tool_service,
                               input_tokens=self._tokens[0], output_tokens=self._tokens[1], state=self._state, cost=self._cost,
                               todo=self._todo)
        try:
            self.query_one("#status", Static).update(text)
        except NoMatches:  # the screen is being torn down
            pass

    def _set_state(self, state: str) -> None:
        self._state = state
        self._refresh_status()

    def _show(self, *rows: Widget) -> AwaitMount:
        """Add rows to the conversation; past MAX_ROWS the oldest finished ones leave the screen
        (the transcript keeps them for /export and /copy all), so a long session stays fast."""
        conversation = self.conversation
        mounted = conversation.mount_all(rows)
        excess = len(conversation.children) + len(rows) - MAX_ROWS
        if excess > 0:
            busy = {id(row) for row in self._tool_rows.values()} | {id(self._answer)}
            old = [row for row in conversation.children if row.id != "earlier" and id(row) not in busy][:excess]
            if old:
                self._hidden += len(old)
                for row in old:
                    row.remove()
                text = f"{self._hidden:,} earlier rows are not shown here; /export writes the whole conversation"
                try:
                    self.query_one("#earlier", Static).update(text)
                except NoMatches:
                    conversation.mount(NoticeRow(text, markup=False, id="earlier", classes="info"), before=0)
        return mounted

    def _note(self, text: str, level: str = "info") -> None:
        self.transcript.add("notice", text)
        if not self._gone:
            self._show(NoticeRow(text, markup=False, classes=level))
        elif level in ("warning", "error"):
            self.late_notes.append(text)  # the launcher prints them once the terminal is back

    # ------------------------------------------------------------------ the session

    def _hooks(self) -> Hooks:
        return Hooks(emit=self._on_event, approver=self.approver, on_text=self._on_text, on_tool_output=self._on_tool_output,
                     progress=lambda line: self._note(line), warn=self._warn, ask=self.asker.ask)

    def _warn(self, line: str) -> None:
        """A warning from the session, or from its journal's writer thread (then handed to ours)."""
        self.post_note(f"warning: {line}", "warning")

    def post_note(self, text: str, level: str = "info") -> None:
        """Show a line in the conversation, from any thread (a lane starting in the background
        reports its progress from worker threads)."""
        if threading.get_ident() == self._ui_thread:
            self._note(text, level)
            return
        try:
            self.call_from_thread(self._note, text, level)
        except RuntimeError:  # the app is not running any more: printed once the terminal is back
            if level in ("warning", "error"):
                self.late_notes.append(text)

    @work(exclusive=True, group="session-start")
    async def _start_session(self) -> None:
        await self._open_session()

    async def _open_session(self) -> None:
        self.approver = TuiApprover(self._show_approval)
        self.asker = TuiAsker(self._show_question)
        self.start_error = None
        resume, self._resume_next = self._resume_next, None
        if resume is not None:
            await self._replay(resume)
        try:
            hooks = self._hooks()
            hooks.resume = resume
            session = self.factory(hooks)
            self._set_state("starting the sandbox lane" if session.settings.sandbox.enabled else "starting")
            await session.start()
        except Exception as exc:  # noqa: BLE001 - shown here, and printed again when the app has closed
            self.start_error = str(exc) or type(exc).__name__
            self._note(f"error: {self.start_error}", "error")
            self.exit_status = 1
            self._set_state("the session did not start: /new tries again, ctrl+q quits")
            return
        self.session = session
        self.exit_status = 0
        self._effort = session.settings.effort
        starting = session.tools_starting
        if starting is not None and not starting.done():
            # The person can type while the ToolService (a lane, say) comes up; a tool call waits for it.
            what = "the sandbox lane" if session.settings.sandbox.enabled else "the tools"
            self._set_state(f"ready ({what} still starting)")
            starting.add_done_callback(lambda start: self._tools_started(session, start))
        else:
            self._set_state("ready")

    def _tools_started(self, session: Session, start: asyncio.Future[None]) -> None:
        """The ToolService's background start ended: ready, or the session cannot go on, and the
        TUI stops with the error (as when a session cannot start at all)."""
        if start.cancelled() or session is not self.session or self._quitting:
            return
        failure = start.exception()
        if failure is None:
            if not self._working:
                self._set_state("ready")
            return
        self.start_error = str(failure) or type(failure).__name__
        self._note(f"error: {self.start_error}", "error")
        self.exit_status = 1
        self.run_worker(self.action_quit(), group="quit")

    def on_prompt_area_submitted(self, message: PromptArea.Submitted) -> None:
        text = message.text
        command = commands.parse(text)
        if command is not None:
            self._hide_suggestions()
            self.run_worker(self._command(*command), group="command")
            return
        session = self.session
        refusal = None
        if session is None or not session.started:
            refusal = "the session has not started"
        elif session.busy or self._working:
            refusal = "still working on the last prompt: Esc stops it"
        if refusal is not None:
            self.notify(refusal, severity="warning")
            message.area.load_text(text)  # kept for later
            message.area.move_cursor(message.area.document.end)
            return
        self._working = True  # until the task ends: a second Enter must not start another
        self._submit(text)

    @work(group="task")
    async def _submit(self, prompt: str) -> None:
        session = self.session
        self.task_done.clear()
        try:
            if session is None:
                return
            entry = self.transcript.add("user", prompt)
            if not self._gone:
                await self._show(UserRow(prompt, entry.at))
            self._set_state("working (Esc stops)")
            await session.submit(prompt)
        except Exception as exc:  # noqa: BLE001 - an internal error ends the task; the session stays usable
            self._note(f"internal error: {type(exc).__name__}: {exc}", "error")
        finally:
            await self._end_answer()
            self._working = False
            self._set_state("ready")
            self.task_done.set()

    def action_stop(self) -> None:
        if self.session is not None and self.session.cancel():
            self._set_state("stopping")

    async def action_quit(self) -> None:
        if self._quitting:
            return
        self._quitting = True
        self._set_state("closing")
        self._shutdown_session()
        if self.close_on_exit:
            await self._close_session()
        self.exit(self.exit_status)

    def _shutdown_session(self) -> None:
        """Deny what is still asked, close open questions (no answer) and interrupt the running task
        (the rest is teardown's)."""
        self.approver.deny_all()
        self.asker.close_all()
        if self.session is not None:
            self.session.cancel()
        if not self._shut_down:
            self._shut_down = True
            self.trace("shutdown")

    async def on_unmount(self) -> None:
        # However the app ends (a crash, app.exit()), asks are denied and the task interrupted;
        # the session is closed here unless the caller does it once the terminal is restored.
        self._unmounting = True
        loop = asyncio.get_running_loop()
        for signum in self._signals:
            loop.remove_signal_handler(signum)
        self._shutdown_session()
        if self.close_on_exit:
            await self._close_session()

    async def teardown(self) -> None:
        """Close the session the app ended with: journal drained and checkpointed, lane removed."""
        await self._close_session()

    async def _close_session(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            self.approver.deny_all()
            self.asker.close_all()
            await session.close()
            await self._end_answer()

    # ------------------------------------------------------------------ events

    def _on_event(self, event: Event) -> None:
        if self.debug_events and not self._gone:
            fields = event.model_dump(mode="json", exclude={"type"})
            self._show(FoldRow(f"event {event.type}", format_arguments(fields)[:MAX_RESULT_SHOWN], classes="debug"))
        if isinstance(event, SessionStart):
            self._start = event
            self._price = self._model_info(event.provider, event.model)
            self._cost = 0.0 if self._price is not None and self._price.input_price is not None else None
            self._refresh_status()
        elif isinstance(event, UserMessageEvent):
            if event.origin == "loop":
                self._note(f"(to the model) {event.text}")
        elif isinstance(event, AssistantText):
            if event.text and self._answer is None:
                self._on_text(event.text)  # the provider did not stream it
            self._finish_answer()
        elif isinstance(event, ToolCallEvent):
            self._finish_answer()
            self._tool_rows[event.id] = ToolRow(event)
            self.transcript.add("tool", f"{event.name}\n{format_arguments(event.arguments)}")
            if not self._gone:
                self._show(self._tool_rows[event.id])
        elif isinstance(event, ToolResultEvent):
            finished = self._tool_rows.pop(event.id, None)
            if finished is not None:
                finished.finish(event)
            mark = "ok" if event.ok else f"error: {event.error_category}"
            self.transcript.add("tool", f"{event.name} -> {mark}\n{event.output[:2000]}")
        elif isinstance(event, UsageEvent):
            self._tokens = (event.total.input_tokens, event.total.output_tokens)
            turn_cost = estimated_cost(event.usage.input_tokens, event.usage.output_tokens, self._price)
            self._cost = None if turn_cost is None or self._cost is None else self._cost + turn_cost
            self._refresh_status()
        elif isinstance(event, ModelSwitch):
            if self._start is not None:
                self._start = self._start.model_copy(update={"provider": event.provider, "model": event.model})
            self._effort = event.effort
            self._price = self._model_info(event.provider, event.model)
            if self._price is None or self._price.input_price is None:
                self._cost = None  # the new model's prices are unknown: no honest total any more
            self._note(f"now talking to {event.provider} · {event.model}" + (f" (effort {event.effort})" if event.effort else ""))
            self._refresh_status()
        elif isinstance(event, Compaction):
            self._finish_answer()
            self.transcript.add("notice", f"conversation compacted ({event.reason}): {event.summary}")
            if not self._gone:
                self._show(FoldRow(f"conversation compacted ({event.reason}, {event.messages_before} messages)",
                                                event.summary, classes="compaction"))
        elif isinstance(event, Notice):
            self._note(event.message, event.level)
        elif isinstance(event, TodoList):
            self.transcript.add("todo", todo_markdown(event.items))
            self._show_todo(event.items)
        elif isinstance(event, Question):
            entry = self.transcript.add("question", question_markdown(event.question, event.answer))
            if not self._gone:
                self._show(QuestionRow(event, entry.at))
        elif isinstance(event, Advisory):
            self._note(f"advisory ({event.detector.replace('_', ' ')}): {event.message}", "warning")
        elif isinstance(event, TaskStatus):
            self._note(f"task {event.status}: {event.summary}", "done" if event.status == "done" else "warning")
        elif isinstance(event, Verification):
            # Every change of the checkpoint is recorded; the person is shown its objections, when they change.
            if event.objections and event.objections != self._objections:
                self._note("verification objections still open:\n" + "\n".join(f"- {o}" for o in event.objections), "warning")
            self._objections = list(event.objections)
        elif isinstance(event, TaskEnd):
            self._finish_answer()
            if event.outcome != "Completed":
                self._note(f"{event.outcome}" + (f": {event.error}" if event.error else ""), "warning")

    def _show_todo(self, items: list[dict[str, Any]]) -> None:
        """The task list above the prompt, and its progress on the status line."""
        self._todo = todo_progress(items) if items else None
        if not self._gone:
            try:
                self.query_one(TodoPanel).show_items(items)
            except NoMatches:  # the screen is being torn down
                pass
        self._refresh_status()

    def _on_text(self, chunk: str) -> None:
        if self._chunks is None:
            entry = self.transcript.add("assistant", "")
            self._answer = AnswerRow(entry.at)
            self._answer_text = []
            self._chunks = asyncio.Queue()
            self._pump = asyncio.ensure_future(self._stream(self._answer, self._chunks))
        self._answer_text.append(chunk)
        self._chunks.put_nowait(chunk)

    async def _stream(self, row: AnswerRow, chunks: asyncio.Queue[str | None]) -> None:
        if self._gone:
            return
        await self._show(row)
        stream = Markdown.get_stream(row.markdown)
        try:
            while (chunk := await chunks.get()) is not None:
                await stream.write(chunk)
        finally:
            await stream.stop()

    def _finish_answer(self) -> None:
        if self._chunks is not None:
            self._chunks.put_nowait(None)
            for entry in reversed(self.transcript.entries):
                if entry.role == "assistant":
                    entry.text = "".join(self._answer_text)
                    break
        self._chunks = None
        self._answer = None

    async def _end_answer(self) -> None:
        self._finish_answer()
        pump, self._pump = self._pump, None
        if pump is not None:
            await pump

    def _on_tool_output(self, call_id: str, chunk: bytes) -> None:
        row = self._tool_rows.get(call_id)
        if row is not None:
            row.add_output(chunk)

    # ------------------------------------------------------------------ approvals

    async def _show_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        answered: asyncio.Future[ApprovalAnswer] = asyncio.get_running_loop().create_future()
        screen = ApprovalScreen(request)

        def done(answer: ApprovalAnswer | None) -> None:
            if not answered.done():
                answered.set_result(answer or ApprovalAnswer(decision="deny"))

        self.push_screen(screen, callback=done)
        try:
            return await answered
        finally:
            if screen.is_attached and self.screen is screen:
                self.pop_screen()

    async def _show_question(self, question: str) -> str | None:
        answered: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        screen = QuestionScreen(question)

        def done(answer: str | None) -> None:
            if not answered.done():
                answered.set_result(answer)

        self.push_screen(screen, callback=done)
        try:
            return await answered
        finally:
            if screen.is_attached and self.screen is screen:
                self.pop_screen()

    # ------------------------------------------------------------------ slash commands and completion

    def on_text_area_changed(self, event: PromptArea.Changed) -> None:
        self.menu.show_for(event.text_area.text)

    @property
    def menu(self) -> CompletionMenu:
        return self.query_one(CompletionMenu)

    def _hide_suggestions(self) -> None:
        self.menu.hide()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The menu's keys are its own only while it is open under a focused prompt; otherwise they
        go on to the prompt (history, Tab completion, Enter)."""
        if not action.startswith("menu_"):
            return True
        try:
            menu = self.menu
        except NoMatches:
            return False
        if not menu.shown or not isinstance(self.focused, PromptArea):
            return False
        # The key may come before the prompt's last change reached the menu: bring it up to date.
        menu.show_for(self.focused.text)
        if not menu.shown:
            return False
        if action == "menu_enter":
            typed = commands.parse(self.focused.text)
            chosen = menu.current
            # A command typed in full (with or without its argument) is sent as typed.
            return chosen is not None and typed is not None and typed[0] != chosen.name
        return True

    def action_menu_move(self, step: int) -> None:
        self.menu.move(step)

    def action_menu_close(self) -> None:
        self.menu.hide()

    def action_menu_take(self) -> None:
        chosen = self.menu.current
        if chosen is not None:
            self._fill(f"/{chosen.name} ")

    def action_menu_enter(self) -> None:
        chosen = self.menu.current
        if chosen is not None:
            self._take(chosen)

    def on_completion_menu_chosen(self, message: CompletionMenu.Chosen) -> None:
        self._take(message.command)

    def _take(self, chosen: commands.Command) -> None:
        """Run the chosen command, or put it in the prompt when it needs an argument."""
        if needs_argument(chosen):
            self._fill(f"/{chosen.name} ")
            return
        area = self.query_one(PromptArea)
        line = f"/{chosen.name}"
        area.prompts.add(line)
        area.clear()
        self.menu.hide()
        self.post_message(PromptArea.Submitted(area, line))

    def _fill(self, line: str) -> None:
        area = self.query_one(PromptArea)
        area.load_text(line)
        area.move_cursor(area.document.end)
        area.focus()

    async def _command(self, name: str, argument: str) -> None:
        planned = commands.planned_text(name)
        if planned is not None:
            self._note(planned)
            return
        handler = getattr(self, f"_cmd_{name}", None) if name in commands.BY_NAME else None
        if handler is None:
            self.notify(f"unknown command /{name}: /help lists them", severity="error")
            return
        await handler(argument)

    async def _cmd_help(self, argument: str) -> None:
        self._note(commands.help_text())

    async def _cmd_quit(self, argument: str) -> None:
        await self.action_quit()

    async def _cmd_new(self, argument: str) -> None:
        if self._quitting:
            return
        await self._clear_session()
        self._start_session()

    async def _clear_session(self) -> None:
        """Close the session and empty the screen and transcript, for the next session."""
        await self._close_session()
        await self.conversation.remove_children()
        self._hidden = 0
        self.transcript = Transcript()
        self._tool_rows.clear()
        self._start, self._tokens = None, (0, 0)
        self._objections = []
        self._show_todo([])

    def _idle_session(self, what: str) -> Session | None:
        """The session when a command may change it now; otherwise says why not and returns None."""
        session = self.session
        if session is None or not session.started:
            self._note(f"{what}: the session has not started yet", "warning")
            return None
        if session.busy or self._working:
            self._note(f"{what}: a task is running; wait for it to end (Esc stops it)", "warning")
            return None
        return session

    async def _switch(self, what: str, change: dict[str, Any]) -> None:
        """Resolve settings with `change` over the launch flags and switch the session to them."""
        session = self._idle_session(what)
        if session is None:
            return
        if self.settings_for is None:
            self._note(f"{what}: switching is not available here", "error")
            return
        flags = {**self.model_flags, **change}
        try:
            settings = await asyncio.to_thread(self.settings_for, {k: v for k, v in flags.items() if k != "effort" or v != "off"})
            if flags.get("effort") == "off":
                settings = settings.model_copy(update={"effort": None})
            await session.switch_model(settings)
        except (OspreyError, RuntimeError, ValueError) as exc:
            self._note(f"{what}: {exc}", "error")
            return
        self.model_flags = flags
        self.current_settings = settings

    async def _cmd_model(self, argument: str) -> None:
        if argument:
            await self._switch(f"/model {argument}", {"model": argument})
            return
        session = self._idle_session("/model")
        if session is None:
            return
        settings = session.settings
        picker = ModelPicker(settings.provider, settings.model, lambda: self._catalogs(settings))
        chosen = await self.push_screen_wait(picker)
        if chosen:
            await self._switch(f"/model {chosen}", {"model": chosen})

    async def _catalogs(self, settings: Settings) -> AsyncIterator[Catalog]:
        import httpx

        from ..catalog import catalog_for_picker

        async with httpx.AsyncClient() as client:
            async for catalog in catalog_for_picker(client, settings.home, settings.provider, settings.base_url, settings.api_key,
                                                    current_model=settings.model):
                yield catalog

    async def _cmd_provider(self, argument: str) -> None:
        name = argument.strip().lower()
        if name not in PROVIDER_NAMES:
            self._note(f"/provider: give one of {', '.join(PROVIDER_NAMES)}", "error")
            return
        # Another provider: its default model and base URL, unless configured for it.
        await self._switch(f"/provider {name}", {"provider": name, "model": None, "base_url": None})

    async def _cmd_effort(self, argument: str) -> None:
        level = argument.strip().lower()
        if level not in (*EFFORT_LEVELS, "off"):
            self._note(f"/effort: unknown level {argument!r}; give one of {', '.join(EFFORT_LEVELS)} or off", "error")
            return
        await self._switch(f"/effort {level}", {"effort": level})

    async def _cmd_verify(self, argument: str) -> None:
        from ..session.verification import VERIFY_AUDIT_PROMPT

        session = self._idle_session("/verify")
        if session is None:
            return
        if session.checkpoint is None:
            self._note("/verify: this session keeps no verification checkpoint", "warning")
            return
        session.arm_verification()
        self._working = True  # as a typed prompt: a second Enter must not start another task
        self._submit(VERIFY_AUDIT_PROMPT)

    async def _cmd_compact(self, argument: str) -> None:
        session = self._idle_session("/compact")
        if session is None:
            return
        self._working = True
        self._set_state("compacting the conversation")
        try:
            await session.compact(argument)
        except (OspreyError, RuntimeError) as exc:
            self._note(f"/compact: {exc}", "error")
        finally:
            self._working = False
            self._set_state("ready")

    async def _cmd_session(self, argument: str) -> None:
        session = self.session
        if session is None or self._start is None:
            self._note("the session has not started yet")
            return
        title = "(no prompt yet)"
        if self.journal is not None:
            try:
                title = (await asyncio.to_thread(find_session, self.journal, session.session_id)).title or title
            except OspreyError:
                pass
        usage = session.usage
        self._note("\n".join([
            f"session: {session.session_id}", f"title: {title}", f"journal: {self.journal or '(not journaled)'}",
            f"turns: {session.loop.turns if session.loop is not None else 0}",
            f"usage: {usage.input_tokens:,} in, {usage.output_tokens:,} out",
        ]))

    async def _cmd_sessions(self, argument: str) -> None:
        if self.journal is None:
            self._note("/sessions: this session is not journaled", "error")
            return
        if self.session is not None and (self.session.busy or self._working):
            self._note("/sessions: a task is running; wait for it to end (Esc stops it)", "warning")
            return
        try:
            rows = await asyncio.to_thread(list_sessions, self.journal)
        except OspreyError as exc:
            self._note(f"/sessions: {exc}", "error")
            return
        cwd = str(self.session.settings.cwd) if self.session is not None else str(Path.cwd())
        chosen = await self.push_screen_wait(SessionsScreen(rows, cwd, self.session.session_id if self.session else None))
        if chosen is not None:
            await self.resume(chosen.id)

    async def resume(self, session_id: str) -> None:
        """Close the current session and go on with the journaled one `session_id`."""
        if self.journal is None or self._quitting:
            return
        try:
            row = await asyncio.to_thread(find_session, self.journal, session_id)
            events = await asyncio.to_thread(load_events, self.journal, row.id)
        except OspreyError as exc:
            self._note(f"cannot resume {session_id}: {exc}", "error")
            return
        await self._clear_session()
        await self._take_recorded_model(events)
        self._resume_next = Resume(row, events)
        self._start_session()

    async def _take_recorded_model(self, events: list[dict[str, Any]]) -> None:
        """Go on with the provider, model and effort a resumed session last ran with."""
        from .launch import recorded_model

        recorded = recorded_model(events)
        if not recorded or self.settings_for is None:
            return
        try:
            self.current_settings = await asyncio.to_thread(self.settings_for, recorded)
        except OspreyError as exc:
            self._note(f"going on with the current model: the session's own ({recorded['provider']} · {recorded['model']}) "
                       f"is not available: {exc}", "warning")
            return
        self.model_flags = dict(recorded)

    async def _replay(self, resume: Resume) -> None:
        """Show a journaled session's conversation: its prompts, answers, tool calls, compactions, questions and
        task declarations, and its last task list."""
        rows: list[Any] = [NoticeRow(f"resumed session {resume.row.id}: {resume.row.title}", markup=False)]
        calls: dict[str, ToolRow] = {}
        todo: list[dict[str, Any]] = []
        for data in resume.events:
            kind = data.get("type")
            try:
                if kind == "user_message" and data.get("origin", "user") == "user":
                    entry = self.transcript.add("user", str(data.get("text", "")))
                    rows.append(UserRow(entry.text, entry.at))
                elif kind == "assistant_text" and data.get("text"):
                    entry = self.transcript.add("assistant", str(data["text"]))
                    answer = AnswerRow(entry.at)
                    answer.markdown = Markdown(entry.text)
                    rows.append(answer)
                elif kind == "tool_call":
                    call = ToolCallEvent.model_validate(data)
                    calls[call.id] = row = ToolRow(call)
                    self.transcript.add("tool", f"{call.name}\n{format_arguments(call.arguments)}")
                    rows.append(row)
                elif kind == "tool_result":
                    result = ToolResultEvent.model_validate(data)
                    if result.id in calls:
                        calls.pop(result.id).finish(result)
                elif kind == "compaction":
                    rows.append(FoldRow("conversation compacted", str(data.get("summary", "")), classes="compaction"))
                elif kind == "question":
                    asked = Question.model_validate(data)
                    entry = self.transcript.add("question", question_markdown(asked.question, asked.answer))
                    rows.append(QuestionRow(asked, entry.at))
                elif kind == "task_status":
                    declared = TaskStatus.model_validate(data)
                    text = f"task {declared.status}: {declared.summary}"
                    self.transcript.add("notice", text)
                    rows.append(NoticeRow(text, markup=False, classes="done" if declared.status == "done" else "warning"))
                elif kind == "todo":
                    todo = TodoList.model_validate(data).items
                elif kind == "usage":
                    total = data.get("total") or {}
                    self._tokens = (int(total.get("input_tokens", 0)), int(total.get("output_tokens", 0)))
            except (ValidationError, TypeError, ValueError):
                continue  # a record cut short in the journal: shown without it
        if not self._gone:
            await self._show(*rows)
        self._show_todo(todo)  # the task list as the session left it

    async def _cmd_diff(self, argument: str) -> None:
        session = self.session
        if session is None or session.home is None:
            self._note("/diff: the session has not started yet")
            return
        try:
            result = await session.home.client.bash(DIFF_COMMAND, timeout_ms=30_000, max_output_bytes=MAX_DIFF_BYTES)
        except OspreyError as exc:
            self._note(f"/diff: {exc}", "error")
            return
        if result.exit_code != 0:
            self._note(f"/diff: git failed (exit {result.exit_code}): {result.output.strip()[:500]}", "error")
            return
        text = result.output
        if not text.strip():
            self._note("/diff: no changes in the workspace")
            return
        note = f"\n[cut: {result.dropped_bytes:,} bytes more; run git diff for all of it]" if result.dropped_bytes else ""
        self.transcript.add("tool", f"git diff\n{text}")
        stat = text.split("\n\n", 1)[0].strip().splitlines()
        title = f"git diff  {stat[-1].strip() if stat else ''}"
        await self._show(FoldRow(title, diff_text(text + note), collapsed=False, classes="diff"))

    async def _cmd_debug(self, argument: str) -> None:
        import os
        import platform

        from .. import __version__

        session = self.session
        self.debug_events = not self.debug_events
        lines = [
            f"osprey {__version__} · {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC",
            f"system: {platform.system()} {platform.release()} ({platform.machine()}), Python {platform.python_version()}",
            f"terminal: {os.environ.get('TERM', '?')} {os.environ.get('TERM_PROGRAM', '')}".rstrip() + f", {self.size.width}x{self.size.height}",
            f"session: {session.session_id if session else '(none)'}",
            f"model: {self._start.provider} · {self._start.model}" if self._start else "model: (the session has not started)",
            "raw events are shown (/debug hides them)" if self.debug_events else "raw events are hidden",
        ]
        summary = getattr(self.trace, "summary", None)
        if callable(summary):
            lines.append(f"launch: {summary()}")
        self._note("\n".join(lines))

    async def _cmd_tools(self, argument: str) -> None:
        if self.session is None or not self.session.started:
            self._note("the session has not started yet")
            return
        lines = [f"{spec.name}: {spec.description.splitlines()[0] if spec.description else ''}" for spec in self.session.tool_specs()]
        self._note("\n".join(lines))

    async def _cmd_extensions(self, argument: str) -> None:
        session = self.session
        if session is None or not session.started:
            self._note("the session has not started yet")
            return
        found = session.extensions.found if session.extensions is not None else None
        if found is None:
            self._note("this session does not load extensions")
            return
        lines = [f"{item.manifest.name}: {item.path} ({item.layer.kind})" for item in found.tools] or ["no custom tools are loaded"]
        left_out = [a for a in found.artifacts if a.kind == "tool" and a.status != "active"]
        for artifact in left_out:
            lines.append(f"not loaded: {artifact.name} ({artifact.status}): {artifact.reason or ''}")
        if found.hooks_path is not None:
            lines.append(f"hooks: {found.hooks_path}")
        if session.extensions is not None and session.extensions.reload_pending:
            lines.append("a reload is pending: it happens at the next turn boundary")
        lines.append("`osprey extensions` shows every artifact and why it is or is not used")
        self._note("\n".join(lines))

    async def _cmd_reload(self, argument: str) -> None:
        session = self.session
        if session is None or not session.started:
            self._note("the session has not started yet")
            return
        try:
            session.request_reload()
        except RuntimeError as exc:
            self._note(f"error: {exc}", "error")
            return
        self._note("the extensions will be found again at the next turn boundary")

    async def _cmd_status(self, argument: str) -> None:
        session = self.session
        if session is None or self._start is None:
            self._note("the session has not started yet")
            return
        usage = session.usage
        self._note("\n".join([
            f"provider: {self._start.provider}", f"model: {self._start.model}", f"approval policy: {self._start.approval_policy}",
            f"home: {session.tool_service_kind}", f"session: {session.session_id}", f"cwd: {session.settings.cwd}",
            f"usage: {usage.input_tokens} in, {usage.output_tokens} out",
        ]))

    async def _cmd_approvals(self, argument: str) -> None:
        from ..policy.store import ApprovalStore

        session = self.session
        if session is None:
            self._note("the session has not started yet")
            return
        workspace = str(session.settings.workspace_root)
        store = ApprovalStore(session.settings.home / "approvals.toml", warn=lambda m: self._note(m, "warning"))
        rules = [r for r in await asyncio.to_thread(store.load) if r.applies_to(workspace)]
        if not rules:
            self._note("no saved approval rules apply here (`osprey approvals` manages them)")
            return
        self._note("\n".join(f"{r.id}  {r.rule}  ({'this project' if r.project else 'everywhere'})" for r in rules))

    async def _cmd_timestamps(self, argument: str) -> None:
        self.screen.toggle_class("-timestamps")

    async def _cmd_export(self, argument: str) -> None:
        session = self.session
        base = session.settings.cwd if session is not None else Path.cwd()
        name = argument or f"osprey-{session.session_id if session else datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}.md"
        path = (base / Path(name).expanduser()).resolve()
        try:
            await asyncio.to_thread(path.write_text, self.transcript.to_markdown(), "utf-8")
        except OSError as exc:
            self._note(f"could not write {path}: {exc.strerror or exc}", "error")
            return
        self._note(f"transcript written to {path}")

    async def _cmd_copy(self, argument: str) -> None:
        if argument == "all":
            self.copy_to_clipboard(self.transcript.to_markdown())
            self._note("transcript copied to the clipboard")
            return
        answer = self.transcript.last_answer()
        if answer is None:
            self._note("no answer to copy yet")
            return
        self.copy_to_clipboard(answer)
        self._note("last answer copied to the clipboard")

    def _handle_exception(self, error: Exception) -> None:
        self.crash = error
        super()._handle_exception(error)
