"""`osprey agent`: a headless front end of the session core, for one prompt."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import OspreyError


def _warn(message: str) -> None:
    sys.stderr.write(f"osprey: warning: {message}\n")


def run_headless(
    prompt: str,
    *,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    effort: str | None = None,
    max_turns: int | None = None,
    replay_file: str | None = None,
    record_file: str | None = None,
    events_jsonl: bool = False,
    cwd: str | None = None,
    approval_policy: str | None = None,
    yolo: bool = False,
    read_only: bool = False,
    sandbox: bool | None = None,
    sandbox_network: bool | None = None,
    sandbox_socket: str | None = None,
    sandbox_token_file: str | None = None,
    allow: Sequence[str] | None = None,
    journal: bool = True,
    resume: str | None = None,
    toolset: str | None = None,
    budget: float | None = None,
    output_schema: str | None = None,
) -> int:
    """Run one session and return its exit status: 0, 1, 2 (usage), or 128 + a stopping signal.

    The session is journaled in `$OSPREY_HOME/sessions.db` unless `journal` is false; `resume`
    (a journaled session's id, or the start of one) goes on with that session's conversation, in
    its working directory unless `cwd` says otherwise."""
    from .config import load_settings
    from .policy.approvals import policy_from_flags
    from .session.core import parse_allow_rules

    try:
        approval_policy = policy_from_flags(yolo=yolo, read_only=read_only, approval_policy=approval_policy, interactive=False)
    except ValueError as exc:
        _error(str(exc))
        return 2
    if cwd is not None:
        cwd = os.path.abspath(cwd)
    resumed: tuple[str, Any] | None = None
    if resume:
        try:
            resumed, cwd = _resume(resume, cwd)
        except OspreyError as exc:
            _error(str(exc))
            return 1
    if replay_file:
        replay_file = os.path.abspath(replay_file)  # a flag's path is relative to where the user is, not to -C
    lane: dict[str, Any] = {
        "enabled": sandbox or bool(sandbox_socket) or None, "network": sandbox_network,
        "socket": os.path.abspath(sandbox_socket) if sandbox_socket else None,
        "token_file": os.path.abspath(sandbox_token_file) if sandbox_token_file else None,
    }
    flags: dict[str, Any] = {
        "provider": provider, "model": model, "base_url": base_url, "effort": effort,
        "max_turns": max_turns, "replay_file": replay_file, "approval_policy": approval_policy,
        "sandbox": {k: v for k, v in lane.items() if v is not None},
    }
    try:
        settings = load_settings(cwd, flags)
    except OspreyError as exc:
        _error(str(exc))
        return 1
    for warning in settings.warnings:
        _warn(warning)
    if settings.sandbox.network and not settings.sandbox.enabled:
        _error("--sandbox-network needs --sandbox")
        return 2
    try:
        parse_allow_rules(allow or [])
    except OspreyError as exc:
        _error(str(exc))
        return 2
    jsonl = events_jsonl or not sys.stdout.isatty()
    try:
        return asyncio.run(_session(settings, prompt, jsonl, record_file, list(allow or []), journal=journal, resumed=resumed, toolset=toolset, budget=budget,
                                   output_schema=os.path.abspath(output_schema) if output_schema else None))
    except OspreyError as exc:
        _error(str(exc))
        return 1


def _resume(session_id: str, cwd: str | None) -> tuple[tuple[str, Any], str | None]:
    """The journaled session's full id and resume point, and the working directory to use: `cwd`,
    or the session's own when it still exists."""
    from .config import load_home
    from .sessions.journal import find_session, journal_path, load_events
    from .sessions.resume import resume_point

    path = journal_path(load_home())
    row = find_session(path, session_id)
    point = resume_point(load_events(path, row.id))
    if cwd is None and os.path.isdir(row.cwd):
        cwd = row.cwd
    return (row.id, point), cwd


def _progress(line: str) -> None:
    sys.stderr.write(f"osprey: {line}\n")


def _error(message: str) -> None:
    sys.stderr.write(f"osprey: error: {message}\n")


async def _session(settings: Any, prompt: str, jsonl: bool, record_file: str | None, allow: list[str], *,
                   journal: bool = True, resumed: tuple[str, Any] | None = None, toolset: str | None = None,
                   budget: float | None = None, output_schema: str | None = None) -> int:
    from .render import JsonlWriter, TerminalRenderer
    from .session.core import Session, SessionOptions
    from .sessions.journal import Journal, journal_path

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
    options = SessionOptions(settings=settings, allow=allow, record_file=Path(record_file) if record_file else None, toolset=toolset,
                             budget=budget, output_schema=Path(output_schema) if output_schema else None)
    if resumed is not None:
        options.session_id, options.resume = resumed
    try:
        recorder = Journal(journal_path(settings.home), warn=_warn) if journal else None
        session = Session(options, emit=out, on_text=out.text, progress=_progress, warn=_warn, journal=recorder)
        async with session:
            end = await session.submit(prompt)
        if jsonl and end.error:
            _error(f"{end.outcome}: {end.error}")  # JSONL consumers see it in session_end too
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
