"""The terminal UI's launch and teardown, in the order the spec gives.

1. configuration (`.env`, global and project config) and resolution of every setting (the CLI);
2. the sandbox lane, only with `--sandbox`: its provisioning starts here and goes on in the
   background while the app draws and the person types (a tool call waits for it);
3. the cached model capabilities, read with no network;
4. the terminal, then the restoration guard (the crash hook);
5. the active system prompt, the session with its journal, the tool layer, the agent;
6. the terminal event loop.

A lane provisioned here belongs to the launch until the first session takes it over: a failure
before then (the terminal, the catalog) removes it here, a failure after it (the dispatcher, the
tools) removes it with the session, and the TUI stops before the agent starts; a lane that fails
to come up in the background stops the TUI with its error. On exit the app
denies open approvals, closes an open question unanswered and interrupts the running task; the terminal is restored; then teardown
closes the session (journal drained and checkpointed, lane removed).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ..config import Settings
    from ..toolservice.homes import ToolServiceHome
    from .app import Hooks, OspreyApp, Resume

PROVIDERS = ("openai", "anthropic")
EFFORTS = ("minimal", "low", "medium", "high")
MAX_MODEL_NAME = 200


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


def recorded_model(events: list[dict[str, Any]]) -> dict[str, str]:
    """The provider, model and effort a journaled session last ran with (its `session_start` and
    `model_switch` events), as launch flags; what the journal does not say is left out."""
    found: dict[str, str] = {}
    for data in events:
        if data.get("type") not in ("session_start", "model_switch"):
            continue
        provider, model, effort = data.get("provider"), data.get("model"), data.get("effort")
        if provider not in PROVIDERS or not isinstance(model, str) or not _plain(model):
            continue  # the replay provider, or a record cut short: nothing to go on with
        found = {"provider": str(provider), "model": model}
        if isinstance(effort, str) and effort in EFFORTS:
            found["effort"] = effort
    return found


def _plain(name: str) -> bool:
    return 0 < len(name) <= MAX_MODEL_NAME and name.isprintable() and not name.isspace()


@dataclass
class Launch:
    """What the CLI resolved (steps 1 and 2): the settings and how to resolve others later."""

    settings: Settings
    settings_for: Callable[[dict[str, Any]], Settings]
    journal: Path
    allow: list[str] = field(default_factory=list)
    resume: Resume | None = None
    model_flags: dict[str, Any] = field(default_factory=dict)  # from the resumed session's record
    title: str = "osprey"
    trace: LaunchTrace = field(default_factory=LaunchTrace)


RunApp = Callable[["OspreyApp"], Awaitable[Any]]


async def launch(plan: Launch, *, run: RunApp | None = None, stderr: TextIO | None = None) -> int:
    """Run the TUI for `plan` and tear it down; returns the exit status. `run` runs the app
    (default: in this terminal; tests pass a Pilot)."""
    from .. import crash
    from ..catalog import initial_catalog
    from ..config import settings_tool_environment
    from ..session.core import Session, SessionOptions, compose_system_prompt, new_session_id
    from ..sessions.journal import Journal
    from ..sessions.resume import resume_point
    from .app import OspreyApp

    out = stderr or sys.stderr
    settings, trace = plan.settings, plan.trace
    first_id = plan.resume.row.id if plan.resume is not None else new_session_id()
    lane: ToolServiceHome | None = None
    handed_over = False
    app: OspreyApp | None = None
    previous_hook = sys.excepthook

    def progress(line: str) -> None:
        if app is not None and app.is_running:
            app.post_note(line)  # the terminal belongs to the app now
            return
        out.write(f"osprey: {line}\n")
        out.flush()
    try:
        if settings.sandbox.enabled:
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
            nonlocal handed_over
            assert app is not None
            current = app.current_settings or settings
            options = SessionOptions(settings=current, allow=list(plan.allow), interactive=True)
            adopt = None
            if not handed_over:
                # The first session: the id the lane was named for, and the lane itself.
                options = options.model_copy(update={"session_id": first_id})
                adopt, handed_over = lane, True
            if hooks.resume is not None:
                options = options.model_copy(update={"session_id": hooks.resume.row.id, "resume": resume_point(hooks.resume.events)})
            compose_system_prompt(current)
            trace("system_prompt")
            session = Session(options, journal=Journal(plan.journal, warn=hooks.warn), home=adopt, trace=trace, **hooks.kwargs())
            trace("session")
            return session

        def guard() -> None:
            crash.install(settings.home)
            trace("guard")

        app = OspreyApp(factory, title=plan.title, warnings=settings.warnings, settings_for=plan.settings_for,
                        journal=plan.journal, resume=plan.resume, catalog=catalog, trace=trace, on_terminal=guard,
                        close_on_exit=False, model_flags=plan.model_flags)
        status = await (run(app) if run is not None else app.run_async())
        trace("terminal_restored")
    finally:
        if app is not None:
            await app.teardown()
        if lane is not None and not handed_over:
            await lane.close()
        trace("teardown")
    sys.excepthook = previous_hook  # a normal end: the crash hook is not needed any more
    for note in app.late_notes:
        out.write(f"osprey: {note}\n")
    if app.crash is not None:
        crash.report(app.crash, settings.home, stream=out)  # restores the terminal if textual could not
        return 1
    if app.start_error is not None:
        out.write(f"osprey: error: {app.start_error}\n")
    return status if isinstance(status, int) else app.exit_status
