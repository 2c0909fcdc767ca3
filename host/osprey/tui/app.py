"""`OspreyApp`: renders a session's events and drives it through `start`, `submit`, `cancel`, `close`.

The app builds nothing of the session itself: a factory given the app's callbacks returns a
`Session` (the CLI builds one from the settings; tests pass a scripted provider)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Markdown, Static

from ..policy.approvals import ApprovalAnswer, ApprovalRequest
from ..session.core import Session
from ..session.events import (
    AssistantText,
    Event,
    Notice,
    SessionStart,
    TaskEnd,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    UserMessageEvent,
)
from . import commands
from .approval_screen import ApprovalScreen
from .approver import TuiApprover
from .transcript import Transcript, format_arguments
from .widgets import AnswerRow, NoticeRow, PromptArea, ToolRow, UserRow


@dataclass
class Hooks:
    """What the app gives the session it drives."""

    emit: Callable[[Event], None]
    approver: TuiApprover
    on_text: Callable[[str], None]
    on_tool_output: Callable[[str, bytes], None]
    progress: Callable[[str], None]
    warn: Callable[[str], None]

    def kwargs(self) -> dict[str, Any]:
        return {"emit": self.emit, "approver": self.approver, "on_text": self.on_text, "on_tool_output": self.on_tool_output,
                "progress": self.progress, "warn": self.warn}


SessionFactory = Callable[[Hooks], Session]
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def status_line(*, provider: str, model: str, policy: str, home: str, input_tokens: int, output_tokens: int, state: str) -> str:
    return f"{provider} · {model} · {policy} · {home} · tokens {input_tokens:,} in / {output_tokens:,} out · {state}"


class OspreyApp(App[int]):
    CSS = """
    #conversation { height: 1fr; padding: 0 1; }
    #status { height: 1; background: $panel; color: $text; padding: 0 1; }
    #suggestions { height: auto; max-height: 10; color: $text-muted; padding: 0 1; display: none; }
    #suggestions.shown { display: block; }
    .-timestamps Stamp { display: block; }
    """
    BINDINGS = [
        Binding("escape", "stop", "stop the task"),
        Binding("ctrl+c", "quit", "quit", priority=True),
        Binding("ctrl+q", "quit", "quit", priority=True),
    ]
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, factory: SessionFactory, *, title: str = "osprey", warnings: Sequence[str] = ()) -> None:
        super().__init__()
        self.factory = factory
        self.warnings = list(warnings)  # from loading the settings: shown first
        self.title = title
        self.session: Session | None = None
        self.approver = TuiApprover(self._show_approval)
        self.transcript = Transcript()
        self.crash: BaseException | None = None
        self.start_error: str | None = None  # why the last session did not start
        self.exit_status = 0
        self._answer: AnswerRow | None = None
        self._answer_text: list[str] = []
        self._chunks: asyncio.Queue[str | None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._tool_rows: dict[str, ToolRow] = {}
        self._state = "starting"
        self._start: SessionStart | None = None
        self._tokens = (0, 0)
        self._quitting = False
        self._unmounting = False
        self._signals: list[int] = []
        self._working = False
        self.task_done = asyncio.Event()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="conversation")
        yield Static("", id="suggestions", markup=False)
        yield Static("starting…", id="status", markup=False)
        yield PromptArea(id="prompt")

    def on_mount(self) -> None:
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
        self._start_session()

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

    def _refresh_status(self) -> None:
        if self._gone:
            return
        start = self._start
        if start is None:
            text = self._state
        else:
            text = status_line(provider=start.provider, model=start.model, policy=start.approval_policy, home=start.tool_service,
                               input_tokens=self._tokens[0], output_tokens=self._tokens[1], state=self._state)
        try:
            self.query_one("#status", Static).update(text)
        except NoMatches:  # the screen is being torn down
            pass

    def _set_state(self, state: str) -> None:
        self._state = state
        self._refresh_status()

    def _note(self, text: str, level: str = "info") -> None:
        self.transcript.add("notice", text)
        if not self._gone:
            self.conversation.mount(NoticeRow(text, markup=False, classes=level))

    # ------------------------------------------------------------------ the session

    def _hooks(self) -> Hooks:
        return Hooks(emit=self._on_event, approver=self.approver, on_text=self._on_text, on_tool_output=self._on_tool_output,
                     progress=lambda line: self._note(line), warn=lambda line: self._note(f"warning: {line}", "warning"))

    @work(exclusive=True, group="session-start")
    async def _start_session(self) -> None:
        self.approver = TuiApprover(self._show_approval)
        self.start_error = None
        try:
            session = self.factory(self._hooks())
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
        self._set_state("ready")

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
                await self.conversation.mount(UserRow(prompt, entry.at))
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
        self.approver.deny_all()
        await self._close_session()
        self.exit(self.exit_status)

    async def on_unmount(self) -> None:
        # However the app ends (a crash, app.exit()), the session is closed: asks denied, lane removed.
        self._unmounting = True
        loop = asyncio.get_running_loop()
        for signum in self._signals:
            loop.remove_signal_handler(signum)
        self.approver.deny_all()
        await self._close_session()

    async def _close_session(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            self.approver.deny_all()
            await session.close()
            await self._end_answer()

    # ------------------------------------------------------------------ events

    def _on_event(self, event: Event) -> None:
        if isinstance(event, SessionStart):
            self._start = event
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
                self.conversation.mount(self._tool_rows[event.id])
        elif isinstance(event, ToolResultEvent):
            finished = self._tool_rows.pop(event.id, None)
            if finished is not None:
                finished.finish(event)
            mark = "ok" if event.ok else f"error: {event.error_category}"
            self.transcript.add("tool", f"{event.name} -> {mark}\n{event.output[:2000]}")
        elif isinstance(event, UsageEvent):
            self._tokens = (event.total.input_tokens, event.total.output_tokens)
            self._refresh_status()
        elif isinstance(event, Notice):
            self._note(event.message, event.level)
        elif isinstance(event, TaskEnd):
            self._finish_answer()
            if event.outcome != "Completed":
                self._note(f"{event.outcome}" + (f": {event.error}" if event.error else ""), "warning")

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
        await self.conversation.mount(row)
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

    # ------------------------------------------------------------------ slash commands and completion

    def on_text_area_changed(self, event: PromptArea.Changed) -> None:
        found = commands.matching(event.text_area.text)
        box = self.query_one("#suggestions", Static)
        if found:
            width = max(len(c.usage) for c in found)
            box.update("\n".join(f"{c.usage.ljust(width)}  {c.help}" for c in found))
            box.add_class("shown")
        else:
            self._hide_suggestions()

    def _hide_suggestions(self) -> None:
        self.query_one("#suggestions", Static).remove_class("shown")

    async def _command(self, name: str, argument: str) -> None:
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
        await self._close_session()
        await self.conversation.remove_children()
        self.transcript = Transcript()
        self._tool_rows.clear()
        self._start, self._tokens = None, (0, 0)
        self._start_session()

    async def _cmd_tools(self, argument: str) -> None:
        if self.session is None or not self.session.started:
            self._note("the session has not started yet")
            return
        lines = [f"{spec.name}: {spec.description.splitlines()[0] if spec.description else ''}" for spec in self.session.tool_specs()]
        self._note("\n".join(lines))

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
