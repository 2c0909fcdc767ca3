"""The session driver: the terminal UI's session, started, given prompts, stopped, switched to
another model, resumed from the journal and closed, through the session's public API alone.

The driver builds nothing of the session itself: a factory given the driver's hooks returns a
`Session` (the launcher builds one from the settings; tests pass a scripted provider). What the
session emits goes to the presenter."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import OspreyError
from .approver import TuiApprover
from .asker import TuiAsker

if TYPE_CHECKING:  # the session's own modules load with the session, after the first screen
    from ..catalog import Catalog, ModelInfo
    from ..config import Settings
    from ..events import Event
    from ..policy.approvals import ApprovalAnswer, ApprovalRequest
    from ..session.core import Session
    from ..sessions.journal import SessionRow
    from ..sessions.resume import ResumePoint
    from .presenter import Presenter


@dataclass
class Resume:
    """A journaled session to go on with: its row, its recorded events, and where it resumes when
    that was already rebuilt from them (the launch's resolution did)."""

    row: SessionRow
    events: list[Event]
    point: ResumePoint | None = None


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


SessionFactory = Callable[[Hooks], "Session"]
# Settings for a model switch: the launch flags with these (provider, model, effort) put over them.
SettingsFor = Callable[[dict[str, Any]], "Settings"]


class Front(Protocol):
    """What the driver needs of the app."""

    def note(self, text: str, level: str = "info") -> None:
        """A line in the conversation, from the UI thread."""
        ...

    def post_note(self, text: str, level: str = "info") -> None:
        """A line in the conversation, from any thread."""
        ...

    def refresh_status(self) -> None: ...

    async def show_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        """Ask the person whether a call may run."""
        ...

    async def show_question(self, question: str) -> str | None:
        """Ask the person the model's question; None when they closed it."""
        ...

    def start_session(self) -> None:
        """Open the next session in the background (`open`)."""
        ...

    def leave(self) -> None:
        """Quit, as /quit does."""
        ...

    def submit(self, prompt: str) -> None:
        """Work `prompt` in the background (`SessionDriver.submit`)."""
        ...

    def show_queue(self, prompts: Sequence[str]) -> None:
        """Show the prompts waiting for the running task to end (empty: hide them)."""
        ...


class SessionDriver:
    """Owns the session the terminal UI shows, one at a time: `/new` and a resume close it and open another."""

    def __init__(self, factory: SessionFactory, front: Front, presenter: Presenter, *, settings_for: SettingsFor | None = None,
                 journal: Path | None = None, resume: Resume | None = None, catalog: Catalog | None = None,
                 trace: Callable[[str], None] = lambda _: None, model_flags: dict[str, Any] | None = None) -> None:
        self.factory = factory
        self.front = front
        self.presenter = presenter
        self.settings_for = settings_for
        self.journal = journal  # the session journal, for /session, /sessions and resuming
        self.resume_next = resume
        self.catalog = catalog
        self.trace = trace
        self.model_flags: dict[str, Any] = dict(model_flags or {})  # what /model, /provider and /effort chose, kept across /new
        self.current_settings: Settings | None = None  # the settings of the last switch, for the next session
        self.session: Session | None = None
        self._opening: Session | None = None  # the session being started
        self.opening = False  # a session is being started: a prompt sent now waits for it
        self.approver = TuiApprover(front.show_approval)
        self.asker = TuiAsker(front.show_question)
        self.state = "starting"
        self.working = False  # a prompt (or /compact) is being worked on, from Enter to its end
        self.queued: list[str] = []  # prompts typed meanwhile, sent in order when it ends
        self.quitting = False
        self.start_error: str | None = None  # why the last session did not start
        self.exit_status = 0
        self._shut_down = False

    def set_state(self, state: str) -> None:
        self.state = state
        self.front.refresh_status()

    def warn(self, line: str) -> None:
        """A warning from the session, or from its journal's writer thread."""
        self.front.post_note(f"warning: {line}", "warning")

    def hooks(self, resume: Resume | None = None) -> Hooks:
        presenter = self.presenter
        return Hooks(emit=presenter.present, approver=self.approver, on_text=presenter.text, on_tool_output=presenter.tool_output,
                     progress=lambda line: self.front.post_note(line), warn=self.warn, resume=resume, ask=self.asker.ask)

    def model_info(self, provider: str, model: str) -> ModelInfo | None:
        """The model's catalog entry (prices, context window) from the cache; no network."""
        if self.catalog is not None and (found := self.catalog.find(provider, model)) is not None:
            return found
        session = self.session or self._opening
        if session is None:
            return None
        from ..catalog import initial_catalog

        try:
            return initial_catalog(session.settings.home, provider, session.settings.base_url, model).find(provider, model)
        except Exception:  # noqa: BLE001 - a cache problem only costs the price display
            return None

    # ------------------------------------------------------------------ the session's life

    async def open(self) -> None:
        """Start the next session (going on with a journaled one, when one is to be resumed)."""
        self.approver = TuiApprover(self.front.show_approval)
        self.asker = TuiAsker(self.front.show_question)
        self.start_error = None
        resume, self.resume_next = self.resume_next, None
        self.opening = True
        try:
            session = await self._start(resume)
        finally:
            self.opening = False
        if session is None:
            return
        self.session = session
        self.exit_status = 0
        starting = session.tools_starting
        if starting is not None and not starting.done():
            # The person can type while the ToolService (a lane, say) comes up; a tool call waits for it.
            what = "the sandbox lane" if session.settings.sandbox.enabled else "the tools"
            self.set_state(f"ready ({what} still starting)")
            starting.add_done_callback(lambda start: self._tools_started(session, start))
        else:
            self.set_state("ready")
        self.send_queued()  # what was sent while the session started

    async def _start(self, resume: Resume | None) -> Session | None:
        """Start a session (showing the resumed one's conversation first); None when it did not start (said)."""
        if resume is not None:
            await self.presenter.replay(resume.events, f"resumed session {resume.row.id}: {resume.row.title}")
        try:
            session = self._opening = self.factory(self.hooks(resume))
            self.set_state("starting the sandbox lane" if session.settings.sandbox.enabled else "starting")
            await session.start()
        except Exception as exc:  # noqa: BLE001 - shown here, and printed again when the app has closed
            self.start_error = str(exc) or type(exc).__name__
            self.front.note(f"error: {self.start_error}", "error")
            self.exit_status = 1
            self.set_state("the session did not start: /new tries again, ctrl+q quits")
            return None
        finally:
            self._opening = None
        return session

    def _tools_started(self, session: Session, start: asyncio.Future[None]) -> None:
        """The ToolService's background start ended: ready, or the session cannot go on, and the
        TUI stops with the error (as when a session cannot start at all)."""
        if start.cancelled() or session is not self.session or self.quitting:
            return
        failure = start.exception()
        if failure is None:
            if not self.working:
                self.set_state("ready")
            return
        self.start_error = str(failure) or type(failure).__name__
        self.front.note(f"error: {self.start_error}", "error")
        self.exit_status = 1
        self.front.leave()

    def refusal(self) -> str | None:
        """Why a prompt cannot be sent (or queued) now, or None when it can."""
        session = self.session
        if self.opening:
            return None  # queued until the session has started
        if session is None or not session.started:
            return "the session has not started"
        return None

    @property
    def busy(self) -> bool:
        """A task is running: a prompt sent now is queued."""
        return self.working or (self.session is not None and self.session.busy)

    def enqueue(self, prompt: str) -> None:
        """Keep `prompt` to send when the running task ends."""
        self.queued.append(prompt)
        self.front.show_queue(self.queued)

    def clear_queue(self) -> int:
        """Drop the queued prompts; returns how many there were."""
        dropped = len(self.queued)
        self.queued.clear()
        self.front.show_queue(self.queued)
        return dropped

    def send_queued(self) -> None:
        """Send the first queued prompt, if the session can take it (when a task has ended)."""
        if not self.queued or self.quitting or self.opening or self.refusal() is not None:
            return
        prompt = self.queued.pop(0)
        self.front.show_queue(self.queued)
        self.front.submit(prompt)

    async def submit(self, prompt: str) -> None:
        """Show the prompt and work it to its end (the caller set `working` when it took the prompt)."""
        session = self.session
        try:
            if session is None:
                return
            mounted = self.presenter.prompt(prompt)
            if mounted is not None:
                await mounted
            self.set_state("working (Esc stops)")
            await session.submit(prompt)
        except Exception as exc:  # noqa: BLE001 - an internal error ends the task; the session stays usable
            self.front.note(f"internal error: {type(exc).__name__}: {exc}", "error")
        finally:
            await self.presenter.end_answer()
            self.working = False
            self.set_state("ready")
            self.send_queued()

    def stop(self) -> None:
        """Stop the running task (Esc)."""
        if self.session is not None and self.session.cancel():
            self.set_state("stopping")

    def shutdown(self) -> None:
        """Deny what is still asked, close open questions (no answer) and interrupt the running task
        (the rest is `close`'s)."""
        self.approver.deny_all()
        self.asker.close_all()
        if self.session is not None:
            self.session.cancel()
        if not self._shut_down:
            self._shut_down = True
            self.trace("shutdown")

    async def close(self) -> None:
        """Close the session: its active workflow runs interrupted, journal drained and checkpointed, lane removed."""
        session, self.session = self.session, None
        if session is not None:
            self.approver.deny_all()
            self.asker.close_all()
            try:
                if session.workflows is not None:
                    await session.workflows.interrupt_all()  # journaled as interrupted before the journal closes
            finally:
                await session.close()
            await self.presenter.end_answer()

    async def renew(self, resume: Resume | None = None) -> None:
        """Close the session, clear the screen, and open a fresh session (or go on with `resume`)."""
        if self.quitting:
            return
        await self.close()
        await self.presenter.clear()
        self.resume_next = resume
        self.front.start_session()

    async def resume(self, session_id: str) -> None:
        """Close the current session and go on with the journaled one `session_id`, with the model it ran with."""
        if self.journal is None or self.quitting:
            return
        from ..sessions.journal import find_session, read_events

        try:
            row = await asyncio.to_thread(find_session, self.journal, session_id)
            events = await asyncio.to_thread(read_events, self.journal, row.id)
        except OspreyError as exc:
            self.front.note(f"cannot resume {session_id}: {exc}", "error")
            return
        await self.close()
        await self._take_recorded_model(events)
        await self.renew(Resume(row, events))

    async def _take_recorded_model(self, events: list[Event]) -> None:
        """Go on with the provider, model and effort a resumed session last ran with."""
        from ..sessions.resume import recorded_model

        recorded = recorded_model(events)
        if not recorded or self.settings_for is None:
            return
        try:
            self.current_settings = await asyncio.to_thread(self.settings_for, recorded)
        except OspreyError as exc:
            self.front.note(f"going on with the current model: the session's own ({recorded['provider']} · {recorded['model']}) "
                            f"is not available: {exc}", "warning")
            return
        self.model_flags = dict(recorded)

    # ------------------------------------------------------------------ changing it between tasks

    def idle(self, what: str) -> Session | None:
        """The session when a command may change it now; otherwise says why not and returns None."""
        session = self.session
        if session is None or not session.started:
            self.front.note(f"{what}: the session has not started yet", "warning")
            return None
        if session.busy or self.working:
            self.front.note(f"{what}: a task is running; wait for it to end (Esc stops it)", "warning")
            return None
        return session

    async def switch(self, what: str, change: dict[str, Any]) -> None:
        """Resolve settings with `change` over the launch flags and switch the session to them."""
        session = self.idle(what)
        if session is None:
            return
        if self.settings_for is None:
            self.front.note(f"{what}: switching is not available here", "error")
            return
        flags = {**self.model_flags, **change}
        try:
            settings = await asyncio.to_thread(self.settings_for, {k: v for k, v in flags.items() if k != "effort" or v != "off"})
            if flags.get("effort") == "off":
                settings = settings.model_copy(update={"effort": None})
            await session.switch_model(settings)
        except (OspreyError, RuntimeError, ValueError) as exc:
            self.front.note(f"{what}: {exc}", "error")
            return
        self.model_flags = flags
        self.current_settings = settings
