"""The terminal UI's launch and teardown, in the order the spec gives, but for the first screen,
which is drawn before the session is set up.

1. configuration (`.env`, global and project config) and resolution of every setting and flag
   (`osprey.session.flags`, called by the CLI);
2. the sandbox lane, only with `--sandbox`: its provisioning starts here and goes on in the
   background while the app draws and the person types (a tool call waits for it);
3. the cached model capabilities, read with no network;
4. the terminal, then the restoration guard (the crash hook);
5. the terminal event loop: the first screen, whose prompt takes keys at once (a prompt sent
   before the session has started waits for it, queued);
6. the active system prompt, the session with its journal, the tool layer, the agent.

SIGTERM and SIGHUP (a closed terminal) end the launch at any of these steps: see `launch`.

A lane provisioned here belongs to the launch: every session the TUI starts (the first, a /new or
a /resume) borrows it, and the teardown removes it after the sessions are closed, whatever
failed (the terminal, the catalog, the dispatcher, the tools; a failed session start stops the
TUI before the agent starts). A lane that fails to come up in the background stops the TUI with
its error. On exit the app denies open approvals, closes an open question unanswered and
interrupts the running task; the terminal is restored; then teardown closes the session (journal
drained and checkpointed), then the lane. Last, when the session the app ended with was kept (it
has a prompt), a line on the restored terminal says how to go on with it (`osprey --resume ID`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..terminal_text import clean

if TYPE_CHECKING:
    from ..config import Settings
    from ..session.core import Session, SessionOptions
    from ..toolservice.homes import ToolServiceHome
    from .app import OspreyApp
    from .driver import Hooks, Resume

class LaunchTrace:
    """The launch and exit steps by name, with the time each was reached (for tests and /debug)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.steps: list[tuple[str, float]] = []

    def __call__(self, step: str) -> None:
        self.steps.append((step, time.perf_counter() - self.started))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.steps]

    def summary(self) -> str:
        """`configuration 12 ms · capabilities 3 ms · ...`: the time each step took after the one before."""
        parts, previous = [], 0.0
        for name, at in self.steps:
            parts.append(f"{name} {(at - previous) * 1000:.0f} ms")
            previous = at
        return " · ".join(parts)


@dataclass
class Launch:
    """What the CLI resolved (steps 1 and 2): the first session's options, and how to resolve
    other settings later (a model switch)."""

    # The options every session of this launch starts from: the settings, --allow, --toolset.
    options: SessionOptions
    settings_for: Callable[[dict[str, Any]], Settings]
    journal: Path
    resume: Resume | None = None
    model_flags: dict[str, Any] = field(default_factory=dict)  # from the resumed session's record
    title: str = "osprey"
    trace: LaunchTrace = field(default_factory=LaunchTrace)

    @property
    def settings(self) -> Settings:
        return self.options.settings


def recorded_persona_of(resume: Resume, launched: Any, settings: Settings) -> Any:
    """The persona a resumed session goes on as: the one its record last names, when it still
    resolves; else the launch's."""
    from ..errors import ConfigError
    from ..personas import resolve_persona
    from ..sessions.resume import recorded_persona

    name = recorded_persona(resume.events)
    if name is None or (launched is not None and launched.name == name):
        return launched
    try:
        return resolve_persona(name, workspace_root=settings.workspace_root, home=settings.home)
    except ConfigError:
        return launched


def session_options(plan: Launch, settings: Settings, session_id: str, resume: Resume | None) -> SessionOptions:
    """The options of a session the TUI starts: the launch's, with the settings of the moment
    (after a model switch), its id, and the journaled session it goes on with (its id then)."""
    from ..sessions.resume import resume_point

    if resume is not None:
        point = resume.point or resume_point(resume.events)
        return plan.options.model_copy(update={"settings": settings, "session_id": resume.row.id, "resume": point,
                                               "persona": recorded_persona_of(resume, plan.options.persona, settings)})
    return plan.options.model_copy(update={"settings": settings, "session_id": session_id, "resume": None})


RunApp = Callable[["OspreyApp"], Awaitable[Any]]
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# Seconds from a stop signal to the end of the process at the latest: the teardown (session closed,
# lane removed) normally takes well under this; past it the process ends anyway (the journal is a
# SQLite database, safe to leave at any point), so a closed terminal never leaves it running.
STOP_BOUND = 10.0


def _end_by(seconds: float, status: int) -> None:
    """End the process with `status` after `seconds`, unless it has ended by then."""
    timer = threading.Timer(seconds, os._exit, (status,))
    timer.daemon = True
    timer.start()


def _say(out: TextIO, line: str) -> None:
    """Write a line for the person; a terminal that went away (it was closed) is not an error."""
    try:
        out.write(line)
        out.flush()
    except OSError:
        pass


async def launch(plan: Launch, *, run: RunApp | None = None, stderr: TextIO | None = None) -> int:
    """Run the TUI for `plan` and tear it down; returns the exit status. `run` runs the app
    (default: in this terminal; tests pass a Pilot).

    SIGTERM and SIGHUP are handled from the start: before the app runs they stop the launch (the
    lane, when one is starting, is removed); from then on the app leaves in order; and the process
    ends within STOP_BOUND seconds of the signal whatever the teardown waits for."""
    import asyncio

    out = stderr or sys.stderr
    loop = asyncio.get_running_loop()
    launching = asyncio.current_task()
    apps: list[OspreyApp] = []  # the app, once it is made
    stopped_by: list[int] = []

    def on_signal(signum: int) -> None:
        if not stopped_by:
            stopped_by.append(signum)
            _end_by(STOP_BOUND, 128 + signum)
        if apps:
            apps[0].stop_for_signal(signum)
        elif launching is not None:
            launching.cancel()

    def made(app: OspreyApp) -> None:
        apps.append(app)

    handled = []
    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
            continue
        handled.append(signum)
    try:
        return await _launch(plan, run, out, made)
    except asyncio.CancelledError:
        if not stopped_by:
            raise
        return 128 + stopped_by[0]
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


async def _launch(plan: Launch, run: RunApp | None, out: TextIO, made: Callable[[OspreyApp], None]) -> int:
    from .. import crash
    from ..catalog import initial_catalog
    from ..session.core import new_session_id
    from .app import OspreyApp

    settings, trace = plan.settings, plan.trace
    first_id = plan.resume.row.id if plan.resume is not None else new_session_id()
    lane: ToolServiceHome | None = None
    first = True
    last_id: str | None = None  # the session the app opened last: the one it ends with
    app: OspreyApp | None = None
    previous_hook = sys.excepthook

    def progress(line: str) -> None:
        if app is not None and app.is_running:
            app.post_note(line)  # the terminal belongs to the app now
            return
        _say(out, f"osprey: {line}\n")
    try:
        if settings.sandbox.enabled:
            from ..config import settings_tool_environment
            from ..toolservice.homes import make_home

            # The lane comes up in the background while the app draws and the person types; the
            # first tool call waits for it, and a lane that fails to start stops the TUI.
            lane = make_home([str(settings.cwd)], sandbox=settings.sandbox, session_id=first_id, home=settings.home,
                             env=settings_tool_environment(settings), progress=progress)
            await lane.begin()
            trace("sandbox")
        catalog = initial_catalog(settings.home, settings.provider, settings.base_url, settings.model)
        trace("capabilities")

        def factory(hooks: Hooks) -> Session:
            # The session's modules load here, after the first screen is drawn.
            from ..session.core import Session, compose_system_prompt
            from ..sessions.journal import Journal

            nonlocal first, last_id
            assert app is not None
            current = app.current_settings or settings
            # The first session has the id the lane was named for; every session borrows the lane.
            session_id, first = (first_id if first else new_session_id()), False
            options = session_options(plan, current, session_id, hooks.resume)
            last_id = options.session_id
            compose_system_prompt(current)
            trace("system_prompt")
            session = Session(options, journal=Journal(plan.journal, warn=hooks.warn), home=lane, trace=trace, **hooks.kwargs())
            trace("session")
            return session

        def guard() -> None:
            crash.install(settings.home)
            trace("guard")

        app = OspreyApp(factory, title=plan.title, warnings=settings.warnings, settings_for=plan.settings_for,
                        journal=plan.journal, resume=plan.resume, catalog=catalog, trace=trace, on_terminal=guard,
                        close_on_exit=False, model_flags=plan.model_flags, own_signals=False)
        made(app)
        status = await (run(app) if run is not None else app.run_async())
        trace("terminal_restored")
    finally:
        try:
            if app is not None:
                await app.teardown()
        finally:
            if lane is not None:
                await lane.close()  # the sessions that borrowed it are closed (or failed to close)
        trace("teardown")
    sys.excepthook = previous_hook  # a normal end: the crash hook is not needed any more
    for note in app.late_notes:
        _say(out, f"osprey: {clean(note)}\n")
    if app.crash is not None:
        try:
            crash.report(app.crash, settings.home, stream=out)  # restores the terminal if textual could not
        except OSError:  # the terminal went away; the report is written before it is mentioned
            pass
        return 1
    if app.start_error is not None:
        _say(out, f"osprey: error: {clean(app.start_error)}\n")
    elif last_id is not None:
        await way_back(plan.journal, last_id, out)
    return status if isinstance(status, int) else app.exit_status


async def way_back(journal: Path, session_id: str, out: TextIO) -> None:
    """Say how to go on with session `session_id`, when the journal kept it (it has a prompt)."""
    import asyncio

    from ..sessions.journal import has_prompt

    if await asyncio.to_thread(has_prompt, journal, session_id):
        _say(out, f"osprey: to go on with this session: osprey --resume {clean(session_id)} (or osprey --continue in this directory)\n")
