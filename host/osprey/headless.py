"""`osprey agent`: a headless front end of the session core, for one prompt."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import OspreyError
from .outcomes import Outcome

if TYPE_CHECKING:
    from .session.core import SessionOptions
    from .session.flags import Resolution


# The options of a run that are not the session's: how events are printed, whether it is journaled.
RUN_OPTIONS = ("events_jsonl", "journal")


def _warn(message: str) -> None:
    sys.stderr.write(f"osprey: warning: {message}\n")


def resolve_options(options: Mapping[str, Any]) -> Resolution:
    """`osprey agent`'s options (as its command parsed them, the prompt aside) resolved into the
    session's settings: a FlagError for a usage error, another OspreyError when they do not resolve."""
    from .session.flags import parse_flags, resolve

    return resolve(parse_flags({k: v for k, v in options.items() if k not in RUN_OPTIONS}, interactive=False))


def run_headless(prompt: str, options: Mapping[str, Any]) -> int:
    """Run one session and return its exit status: 0, 1, 2 (usage), or 128 + a stopping signal.

    The session is journaled in `$OSPREY_HOME/sessions.db` unless `journal` is false; `resume`
    (a journaled session's id, or the start of one) or `continue_` goes on with a session's
    conversation and model, in its working directory unless `cwd` says otherwise."""
    # Start-up makes many objects that live as long as the process (modules, classes, schemas) and
    # next to no garbage: the cyclic collector, whose full scans of them cost tens of ms, stays off
    # until the session has started, and what start-up made is then frozen out of its scans.
    gc.disable()
    try:
        return _run(prompt, options)
    finally:
        gc.freeze()  # the scan at interpreter exit then skips it all too
        gc.enable()


def _run(prompt: str, options: Mapping[str, Any]) -> int:
    from .session.flags import FlagError

    try:
        resolution = resolve_options(options)
    except FlagError as exc:
        _error(str(exc))
        return 2
    except OspreyError as exc:
        _error(str(exc))
        return 1
    for warning in resolution.settings.warnings:
        _warn(warning)
    jsonl = bool(options.get("events_jsonl")) or not sys.stdout.isatty()
    try:
        session_id = _prepare_lane(resolution)
        session_options = resolution.session_options()
        if session_id is not None:
            session_options.session_id = session_id
        return asyncio.run(_session(session_options, prompt, jsonl, journal=bool(options.get("journal", True))))
    except OspreyError as exc:
        _error(str(exc))
        return 1


def _progress(line: str) -> None:
    sys.stderr.write(f"osprey: {line}\n")


def _error(message: str) -> None:
    sys.stderr.write(f"osprey: error: {message}\n")


def _prepare_lane(resolution: Any) -> str | None:
    """With `--sandbox`, start making the session's lane now, before the session's own set-up
    (the session takes it over); the session id it is named for, or None without a new lane."""
    settings = resolution.settings
    if not settings.sandbox.enabled or settings.sandbox.socket or settings.sandbox.lane_file:
        return None
    from .session.core import new_session_id
    from .toolservice.home_config import home_config, prepare_home

    session_id: str = resolution.resumed.row.id if resolution.resumed is not None else new_session_id()
    prepare_home(home_config([str(settings.cwd)], sandbox=settings.sandbox, session_id=session_id, home=settings.home))
    return session_id


async def _session(options: SessionOptions, prompt: str, jsonl: bool, *, journal: bool = True) -> int:
    from .render import JsonlWriter, TerminalRenderer
    from .session.core import Session
    from .sessions.journal import Journal, journal_path
    from .toolservice.homes import start_when_quiet

    # The local dispatcher is started once the session waits (for the model's answer, say), not
    # while the session's own start needs the CPU; a run that calls no tool mostly never starts one.
    start_when_quiet.set(True)
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    received: list[int] = []
    session: Session | None = None

    def on_signal(signum: int) -> None:
        # Ctrl-C, SIGTERM (timeout, CI cancellation) and SIGHUP (a closed terminal) all end the
        # session in order: the running task is cancelled, session_end is written, the lane and
        # the dispatcher are torn down. A second signal means "now": leave at once (the next
        # start reaps whatever is left).
        if received:
            if session is not None and session.processes is not None:
                session.processes.kill_all()  # they live in sessions of their own: nothing else would stop them
            _flush_and_exit(128 + received[0])  # the status of the signal that stopped the run
        received.append(signum)
        if session is not None and session.cancel(signal=signum):
            return  # the task ends Cancelled; the teardown follows in order
        if session is None or not session.started:
            task.cancel()  # still starting: stop that
        # otherwise the run is over; let the teardown finish rather than cut it short

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    out = JsonlWriter() if jsonl else TerminalRenderer()
    emit = _warnings_on_stderr(out) if jsonl else out
    try:
        recorder = Journal(journal_path(options.settings.home), warn=_warn) if journal else None
        session = Session(options, emit=emit, on_text=out.text, on_tool_output=out.tool_output, progress=_progress, warn=_warn, journal=recorder)
        async with session:
            gc.freeze()  # started (see run_headless)
            gc.enable()
            end = await session.submit(prompt)
        if jsonl and end.error:
            # JSONL consumers see it in session_end too; the prefix already says it is an error.
            _error(end.error if end.outcome == Outcome.ERROR else f"{end.outcome}: {end.error}")
        return end.exit_status
    except asyncio.CancelledError:
        # Cancelled before the task started (or during teardown).
        return 128 + received[0] if received else 1
    finally:
        for signum in STOP_SIGNALS:
            try:
                loop.remove_signal_handler(signum)
            except Exception:  # noqa: BLE001 - the loop may be closing
                pass


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _flush_and_exit(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe must not stop the exit
            pass
    os._exit(status)


def _warnings_on_stderr(out: Any) -> Any:
    """The JSON Lines writer, with the lead session's warning notices (an extension that does not
    run) also on stderr, as the settings' warnings are: stdout is for programs, stderr for the
    person reading a terminal or a CI log."""
    from .events import Event, Notice
    from .terminal_text import clean

    def emit(event: Event) -> None:
        out(event)
        if isinstance(event, Notice) and event.level == "warning" and event.agent_id is None:
            _warn(clean(event.message))

    return emit

