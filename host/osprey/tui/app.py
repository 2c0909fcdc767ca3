"""`OspreyApp`: the terminal UI's textual app. It composes the screen, and three parts do the rest:
the session driver (`driver.py`) starts, drives and closes the session; the presenter
(`presenter.py`) shows what the session emits, live or replayed from the journal; the slash
commands (`slash.py`) run what the person types after `/`.

The app builds nothing of the session itself: a factory given the app's hooks returns a `Session`
(the launcher builds one from the settings; tests pass a scripted provider). The first screen is
drawn before the first session starts; what the screen does not need (the session's modules, the
Markdown renderer, the pickers and the modal screens) is imported when it is first used."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.widget import AwaitMount, Widget
from textual.widgets import Static

from ..numbers import counted
from ..terminal_text import clean
from . import commands
from .children import ChildrenPanel
from .completion import CompletionMenu
from .driver import Resume, SessionDriver, SessionFactory, SettingsFor
from .presenter import Presenter
from .slash import SlashCommands
from .widgets import Conversation, NoticeRow, PromptArea, QueuePanel, TodoPanel, answer_markdown

if TYPE_CHECKING:  # what the first screen does not need is imported when it is used
    from ..catalog import Catalog, ModelInfo
    from ..config import Settings
    from ..policy.approvals import ApprovalAnswer, ApprovalRequest
    from ..session.core import Session
    from .approver import TuiApprover
    from .asker import TuiAsker
    from .transcript import Transcript

MAX_ROWS = 300  # conversation rows kept on the screen
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
QUIT_WINDOW = 2.0  # seconds within which a second Ctrl+C quits


class OspreyApp(App[int]):
    CSS = """
    #conversation { height: 1fr; padding: 0 1; }
    #status { height: 1; background: $panel; color: $text; padding: 0 1; }
    .-timestamps Stamp { display: block; }
    ToastRack { dock: top; align: right top; margin-bottom: 0; max-height: 60%; }
    """
    BINDINGS = [
        Binding("escape", "stop", "stop the task"),
        Binding("ctrl+c", "interrupt", "stop the task; twice quits", priority=True),
        Binding("ctrl+q", "quit", "quit", priority=True),
        Binding("ctrl+o", "toggle_newest", "open or close the newest tool row"),
    ]
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, factory: SessionFactory, *, title: str = "osprey", warnings: Sequence[str] = (),
                 settings_for: SettingsFor | None = None, journal: Path | None = None, resume: Resume | None = None,
                 catalog: Catalog | None = None, trace: Callable[[str], None] | None = None,
                 on_terminal: Callable[[], None] | None = None, close_on_exit: bool = True,
                 model_flags: dict[str, Any] | None = None, own_signals: bool = True) -> None:
        """`catalog`: the model capabilities read at launch; `trace` records the launch steps;
        `on_terminal` runs once the terminal is set up (the launcher installs its crash guard);
        `close_on_exit=False` leaves closing the session to the caller (`teardown()`), after
        the terminal is restored; `own_signals=False`: the caller handles SIGTERM and SIGHUP
        and passes them on (`stop_for_signal`)."""
        from .terminal import TerminalDriver

        super().__init__(driver_class=TerminalDriver)
        self.own_signals = own_signals
        self._pending_signal: int | None = None  # a stop signal that came before the screen was up
        self._mounted = False
        self._opening: asyncio.Task[None] | None = None  # the first session's start
        self.trace = trace or (lambda _: None)
        self.on_terminal = on_terminal
        self.close_on_exit = close_on_exit
        self.warnings = list(warnings)  # from loading the settings: shown first
        self.title = title
        self.late_notes: list[str] = []  # warnings and errors that came after the screen was gone
        self.crash: BaseException | None = None
        self.presenter = Presenter(self)
        self.driver = SessionDriver(factory, self, self.presenter, settings_for=settings_for, journal=journal, resume=resume,
                                    catalog=catalog, trace=self.trace, model_flags=model_flags)
        self.slash = SlashCommands(self)
        self._hidden = 0  # rows taken off the screen in a long conversation
        self._ui_thread = threading.get_ident()
        self._unmounting = False
        self._signals: list[int] = []
        self._interrupted = -QUIT_WINDOW  # when Ctrl+C was last pressed (time.monotonic)

    # ------------------------------------------------------------------ the parts' state, as the launcher reads it

    @property
    def session(self) -> Session | None:
        return self.driver.session

    @property
    def transcript(self) -> Transcript:
        return self.presenter.transcript

    @property
    def approver(self) -> TuiApprover:
        return self.driver.approver

    @property
    def asker(self) -> TuiAsker:
        return self.driver.asker

    @property
    def current_settings(self) -> Settings | None:
        return self.driver.current_settings

    @property
    def model_flags(self) -> dict[str, Any]:
        return self.driver.model_flags

    @property
    def start_error(self) -> str | None:
        return self.driver.start_error

    @property
    def exit_status(self) -> int:
        return self.driver.exit_status

    @exit_status.setter
    def exit_status(self, status: int) -> None:
        self.driver.exit_status = status

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Conversation(id="conversation")
        yield TodoPanel(id="todo")
        yield QueuePanel(id="queue")
        yield ChildrenPanel(self.presenter.children, id="children")
        menu = CompletionMenu(id="suggestions")
        yield menu
        yield Static("starting…", id="status", markup=False)
        yield PromptArea(menu, id="prompt")

    async def on_mount(self) -> None:
        self.trace("terminal")
        if self.on_terminal is not None:
            self.on_terminal()
        self._ui_thread = threading.get_ident()
        self.conversation.anchor()
        self.query_one(PromptArea).focus()
        if self.own_signals:
            loop = asyncio.get_running_loop()
            for signum in STOP_SIGNALS:
                try:
                    loop.add_signal_handler(signum, self._on_signal, signum)
                except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
                    continue
                self._signals.append(signum)
        self._mounted = True
        if self._pending_signal is not None:
            self._on_signal(self._pending_signal)
            return
        for warning in self.warnings:
            self.note(f"warning: {warning}", "warning")
        # The first screen is drawn before the first session starts: the prompt takes keys at
        # once, and what is sent meanwhile waits for the session.
        self.call_after_refresh(self._open_first)

    def _open_first(self) -> None:
        if self.driver.quitting:
            return
        self._opening = asyncio.create_task(self._first_session())

    async def _first_session(self) -> None:
        # One that cannot start (the dispatcher, the tools) stops the TUI, and the launcher prints why.
        await self.driver.open()
        if self.driver.start_error is not None and not self.driver.quitting:
            self.driver.quitting = True
            self.exit(1)
            return
        await asyncio.to_thread(answer_markdown)  # loaded before the first answer, off the UI's thread

    def on_ready(self) -> None:
        self.trace("event_loop")

    def stop_for_signal(self, signum: int) -> None:
        """SIGTERM or SIGHUP, from the launcher: leave in order (before the screen is up, as soon as it is)."""
        if self._mounted:
            self._on_signal(signum)
        elif self._pending_signal is None:
            self._pending_signal = signum

    def _on_signal(self, signum: int) -> None:
        # SIGTERM or SIGHUP (a closed terminal): leave in order, as /quit does, with 128 + the signal.
        if not self.driver.quitting:
            self.exit_status = 128 + signum
            self.leave()

    @property
    def conversation(self) -> Conversation:
        return self.query_one("#conversation", Conversation)

    # ------------------------------------------------------------------ the screen, for the presenter

    @property
    def gone(self) -> bool:
        """The screen is being torn down: events go to the transcript only."""
        if self._unmounting:
            return True
        try:
            return not self.conversation.is_attached
        except NoMatches:
            return True

    def mount_rows(self, rows: Sequence[Widget]) -> AwaitMount:
        """Add rows to the conversation; past MAX_ROWS the oldest finished ones leave the screen
        (the transcript keeps them for /export and /copy all), so a long session stays fast."""
        conversation = self.conversation
        mounted = conversation.mount_all(rows)
        excess = len(conversation.children) + len(rows) - MAX_ROWS
        if excess > 0:
            busy = self.presenter.busy_rows()
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

    async def clear_rows(self) -> None:
        await self.conversation.remove_children()
        self._hidden = 0

    def show_todo(self, items: Sequence[Mapping[str, Any]]) -> None:
        if self.gone:
            return
        try:
            self.query_one(TodoPanel).show_items(items)
        except NoMatches:  # the screen is being torn down
            pass

    def refresh_status(self) -> None:
        if self.gone:
            return
        try:
            self.query_one("#status", Static).update(self.presenter.status(self.driver.state))
        except NoMatches:  # the screen is being torn down
            pass

    def model_info(self, provider: str, model: str) -> ModelInfo | None:
        return self.driver.model_info(provider, model)

    def late_note(self, text: str) -> None:
        self.late_notes.append(text)  # the launcher prints them once the terminal is back

    # ------------------------------------------------------------------ the app, for the driver

    def note(self, text: str, level: str = "info") -> None:
        self.presenter.note(text, level)

    def post_note(self, text: str, level: str = "info") -> None:
        """Show a line in the conversation, from any thread (a lane starting in the background
        reports its progress from worker threads)."""
        if threading.get_ident() == self._ui_thread:
            self.note(text, level)
            return
        try:
            self.call_from_thread(self.note, text, level)
        except RuntimeError:  # the app is not running any more: printed once the terminal is back
            if level in ("warning", "error"):
                self.late_notes.append(text)

    def start_session(self) -> None:
        self.run_worker(self.driver.open(), exclusive=True, group="session-start")

    def leave(self) -> None:
        self.run_worker(self.action_quit(), group="quit")

    def submit(self, prompt: str) -> None:
        """Work `prompt` in the background (a prompt sent meanwhile is queued)."""
        self.driver.working = True
        self.run_worker(self.driver.submit(prompt), group="task")

    def show_queue(self, prompts: Sequence[str]) -> None:
        if self.gone:
            return
        try:
            self.query_one(QueuePanel).show_prompts(prompts)
        except NoMatches:  # the screen is being torn down
            pass

    async def show_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        from ..policy.approvals import ApprovalAnswer
        from .approval_screen import ApprovalScreen

        answer = await self._ask(ApprovalScreen(request))
        return answer or ApprovalAnswer(decision="deny")

    async def show_question(self, question: str) -> str | None:
        from .question_screen import QuestionScreen

        answer: str | None = await self._ask(QuestionScreen(question))
        return answer

    async def _ask(self, screen: Any) -> Any:
        """Put a modal screen in front of the person and return what it was dismissed with."""
        answered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(answer: Any) -> None:
            if not answered.done():
                answered.set_result(answer)

        self.push_screen(screen, callback=done)
        try:
            return await answered
        finally:
            if screen.is_attached and self.screen is screen:
                self.pop_screen()

    # ------------------------------------------------------------------ prompts and keys

    def on_prompt_area_submitted(self, message: PromptArea.Submitted) -> None:
        text = message.text
        command = commands.parse(text)
        if command is not None:
            self.menu.hide()
            self.run_worker(self.slash.run(*command), group="command")
            return
        if not self.send(text):
            message.area.load_text(text)  # kept for later
            message.area.move_cursor(message.area.document.end)

    def send(self, text: str) -> bool:
        """Send a prompt now, or queue it while a task runs; False (said) when the session cannot take it."""
        refusal = self.driver.refusal()
        if refusal is not None:
            self.notify(clean(refusal), severity="warning", markup=False)
            return False
        if self.driver.busy or self.driver.opening:
            self.driver.enqueue(text)  # sent when the running task ends, or when the session has started
        else:
            self.submit(text)
        return True

    def action_stop(self) -> None:
        """Esc: stop the running task and drop the prompts queued after it."""
        dropped = self.driver.clear_queue()
        if dropped:
            self.note(f"dropped {counted(dropped, 'queued prompt')}")
        self.driver.stop()

    def action_interrupt(self) -> None:
        """Ctrl+C: stop the running task (or clear the prompt); a second one within QUIT_WINDOW quits."""
        now = time.monotonic()
        if now - self._interrupted <= QUIT_WINDOW:
            self.leave()
            return
        self._interrupted = now
        area = self.query_one(PromptArea)
        if self.driver.busy:
            self.action_stop()
            done = "stopping the task"
        elif area.text:
            area.clear()
            done = "prompt cleared"
        else:
            done = "nothing to stop"
        self.notify(f"{done}; Ctrl+C again within {QUIT_WINDOW:.0f} s quits (or /quit)", timeout=QUIT_WINDOW + 1, markup=False)

    def action_toggle_newest(self) -> None:
        self.conversation.toggle_newest()

    def on_prompt_area_scroll(self, message: PromptArea.Scroll) -> None:
        conversation = self.conversation
        {"page_up": conversation.scroll_page_up, "page_down": conversation.scroll_page_down,
         "home": conversation.scroll_home, "end": conversation.scroll_end}[message.where](animate=False)

    def on_prompt_area_to_rows(self, message: PromptArea.ToRows) -> None:
        if not self.conversation.enter():
            self.notify("no tool rows yet", timeout=2, markup=False)

    def on_conversation_leave(self, message: Conversation.Leave) -> None:
        self.query_one(PromptArea).focus()

    async def action_quit(self) -> None:
        driver = self.driver
        if driver.quitting:
            return
        driver.quitting = True
        driver.set_state("closing")
        driver.shutdown()
        if self.close_on_exit:
            await driver.close()
        self.exit(self.exit_status)

    async def on_unmount(self) -> None:
        # However the app ends (a crash, app.exit()), asks are denied and the task interrupted;
        # the session is closed here unless the caller does it once the terminal is restored.
        self._unmounting = True
        loop = asyncio.get_running_loop()
        for signum in self._signals:
            loop.remove_signal_handler(signum)
        await self._stop_opening()
        self.driver.shutdown()
        if self.close_on_exit:
            await self.driver.close()

    async def teardown(self) -> None:
        """Close the session the app ended with: journal drained and checkpointed, lane removed
        (one still starting is stopped first)."""
        await self._stop_opening()
        await self.driver.close()

    async def _stop_opening(self) -> None:
        opening = self._opening
        if opening is not None and not opening.done():
            opening.cancel()
            await asyncio.wait([opening])

    # ------------------------------------------------------------------ the slash-command menu

    def on_text_area_changed(self, event: PromptArea.Changed) -> None:
        self.menu.show_for(event.text_area.text)

    @property
    def menu(self) -> CompletionMenu:
        return self.query_one(CompletionMenu)

    def on_completion_menu_chosen(self, message: CompletionMenu.Chosen) -> None:
        self.query_one(PromptArea).take(message.command)

    def _handle_exception(self, error: Exception) -> None:
        self.crash = error
        super()._handle_exception(error)
