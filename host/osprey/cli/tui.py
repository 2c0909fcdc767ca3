"""`osprey` without a subcommand: the terminal UI. Its options, and the launch; heavy imports happen at launch."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from ..policy import POLICIES

PROVIDERS = ["openai", "anthropic"]
EFFORTS = ["minimal", "low", "medium", "high"]

OPTIONS: list[Callable[[Any], Any]] = [
    click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory (default: the current one)."),
    click.option("--provider", type=click.Choice(PROVIDERS), help="Model provider (default: openai)."),
    click.option("--model", help="Model name as the provider knows it."),
    click.option("--base-url", help="API base URL, e.g. http://localhost:8080/v1 for an OpenAI-compatible server."),
    click.option("--effort", type=click.Choice(EFFORTS), help="Reasoning effort, where the model supports it."),
    click.option("--approval-policy", type=click.Choice(POLICIES), help="Which tool calls run without asking (TUI default: on-request)."),
    click.option("--yolo", is_flag=True, help="Run every tool call without asking (policy never)."),
    click.option("--read-only", is_flag=True, help="Ask before anything but the trusted read-only tools (policy unless-trusted)."),
    click.option("--sandbox", is_flag=True, default=None, help="Run the tools in a sandbox lane, made at start and removed on quit."),
    click.option("--sandbox-network", is_flag=True, default=None, help="With --sandbox: allow network egress from the lane."),
    click.option("--allow", "allow", multiple=True, metavar="RULE", help="Pre-approve calls matching RULE for this session (repeatable)."),
    click.option("--resume", "resume", metavar="ID", help="Go on with a journaled session (its id or a unique start of it)."),
    click.option("--continue", "continue_", is_flag=True, help="Go on with the newest journaled session of this directory."),
]


def tui_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(OPTIONS):
        function = option(function)
    return function


def given(options: dict[str, Any]) -> list[str]:
    """The TUI options set on the command line (they mean nothing before a subcommand)."""
    return [name for name, value in options.items() if value not in (None, False, ())]


def _error(message: str) -> None:
    sys.stderr.write(f"osprey: error: {message}\n")


def run_tui(
    *, cwd: str | None = None, provider: str | None = None, model: str | None = None, base_url: str | None = None,
    effort: str | None = None, approval_policy: str | None = None, yolo: bool = False, read_only: bool = False,
    sandbox: bool | None = None, sandbox_network: bool | None = None, allow: tuple[str, ...] = (),
    resume: str | None = None, continue_: bool = False,
) -> int:
    """Resolve the settings (a configuration error exits 1 before the UI opens), then launch the TUI."""
    import asyncio

    from ..config import load_settings
    from ..errors import OspreyError
    from ..policy.approvals import policy_from_flags
    from ..session.core import parse_allow_rules
    from ..sessions.journal import find_session, journal_path, list_sessions, load_events
    from ..tui.app import Resume
    from ..tui.launch import Launch, LaunchTrace, launch, recorded_model

    trace = LaunchTrace()
    if resume and continue_:
        _error("choose one of --resume and --continue")
        return 2
    try:
        approval_policy = policy_from_flags(yolo=yolo, read_only=read_only, approval_policy=approval_policy, interactive=True)
    except ValueError as exc:
        _error(str(exc))
        return 2
    lane = {"enabled": sandbox, "network": sandbox_network}
    flags: dict[str, Any] = {
        "provider": provider, "model": model, "base_url": base_url, "effort": effort, "approval_policy": approval_policy,
        "sandbox": {k: v for k, v in lane.items() if v is not None},
    }
    try:
        settings = load_settings(cwd, flags, interactive=True)
        parse_allow_rules(allow)
    except OspreyError as exc:
        _error(str(exc))
        return 1
    if settings.sandbox.network and not settings.sandbox.enabled:
        _error("--sandbox-network needs --sandbox")
        return 2
    journal = journal_path(settings.home)
    going_on: Resume | None = None
    ran_with: dict[str, Any] = {}
    if resume or continue_:
        try:
            if resume:
                row = find_session(journal, resume)
            else:
                newest = list_sessions(journal, str(settings.cwd), limit=1)
                if not newest:
                    _error(f"no journaled session in {settings.cwd}; `osprey sessions list --all` shows the saved ones")
                    return 1
                row = newest[0]
            going_on = Resume(row, load_events(journal, row.id))
        except OspreyError as exc:
            _error(str(exc))
            return 1
        # Go on with the provider, model and effort the session ran with, unless given here.
        ran_with = {k: v for k, v in recorded_model(going_on.events).items() if flags.get(k) is None}
        if ran_with:
            try:
                settings = load_settings(cwd, {**flags, **ran_with}, interactive=True)
            except OspreyError as exc:
                _error(f"cannot go on with {ran_with.get('provider', settings.provider)} · {ran_with.get('model', settings.model)}, "
                       f"the model session {going_on.row.id} ran with: {exc}; give --provider/--model to choose another")
                return 1
    trace("configuration")
    if not sys.stdin.isatty() or not sys.stderr.isatty():  # textual reads keys from stdin and draws on stderr
        _error("the terminal UI needs a terminal; for scripts use `osprey agent PROMPT`")
        return 2

    def settings_for(change: dict[str, Any]) -> Any:
        return load_settings(cwd, {**flags, **change}, interactive=True)

    plan = Launch(settings=settings, settings_for=settings_for, journal=journal, allow=list(allow), resume=going_on,
                  model_flags=ran_with, title=f"osprey · {os.path.basename(str(settings.cwd)) or '/'}", trace=trace)
    try:
        return asyncio.run(launch(plan))
    except OspreyError as exc:  # before the terminal was set up: the lane could not start, say
        _error(str(exc))
        return 1
