"""`osprey` without a subcommand: the terminal UI, from its options (`options.py`) resolved to its launch; heavy imports happen at launch."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..session.flags import Resolution
    from ..tui.launch import Launch, LaunchTrace


def given(options: Mapping[str, Any]) -> list[str]:
    """The TUI options set on the command line (they mean nothing before a subcommand)."""
    return [name for name, value in options.items() if value not in (None, False, ())]


def _error(message: str) -> None:
    sys.stderr.write(f"osprey: error: {message}\n")


def resolve_options(options: Mapping[str, Any]) -> Resolution:
    """The TUI's options (as the command parsed them) resolved into its first session's settings:
    a FlagError for a usage error, another OspreyError when they do not resolve."""
    from ..session.flags import parse_flags, resolve

    return resolve(parse_flags(options, interactive=True))


def plan_for(resolution: Resolution, trace: LaunchTrace | None = None) -> Launch:
    """The TUI's launch plan for what its options resolved to."""
    from ..sessions.journal import journal_path
    from ..tui.driver import Resume
    from ..tui.launch import Launch, LaunchTrace

    settings = resolution.settings
    resumed = resolution.resumed
    return Launch(options=resolution.session_options(), settings_for=resolution.settings_for, journal=journal_path(settings.home),
                  resume=Resume(resumed.row, resumed.events, resumed.point) if resumed is not None else None, model_flags=dict(resolution.model_flags),
                  title=f"osprey · {os.path.basename(str(settings.cwd)) or '/'}", trace=trace or LaunchTrace())


def run_tui(**options: Any) -> int:
    """Resolve the settings (a configuration error exits 1 before the UI opens), then launch the TUI."""
    import asyncio

    from ..errors import OspreyError
    from ..session.flags import FlagError
    from ..tui.launch import LaunchTrace, launch

    trace = LaunchTrace()
    try:
        resolution = resolve_options(options)
    except FlagError as exc:
        _error(str(exc))
        return 2
    except OspreyError as exc:
        _error(str(exc))
        return 1
    trace("configuration")
    if not sys.stdin.isatty() or not sys.stderr.isatty():  # textual reads keys from stdin and draws on stderr
        _error("the terminal UI needs a terminal; for scripts use `osprey agent PROMPT`")
        return 2
    try:
        return asyncio.run(launch(plan_for(resolution, trace)))
    except OspreyError as exc:  # before the terminal was set up: the lane could not start, say
        _error(str(exc))
        return 1
