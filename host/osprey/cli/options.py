"""The options of `osprey` (the terminal UI) and `osprey agent` (headless), declared once.

Both commands take the same session options, with the same help; `osprey.session.flags`
resolves them, so a flag means the same in both. A few options are `osprey agent`'s alone (see
`HEADLESS_ONLY`). Only click is imported here: `--help` must stay fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..choices import EFFORTS, MODEL_PROVIDERS, REPLAY_PROVIDER
from ..policy import POLICIES

F = TypeVar("F", bound=Callable[..., Any])

PROVIDERS = list(MODEL_PROVIDERS)
HEADLESS_PROVIDERS = [*PROVIDERS, REPLAY_PROVIDER]  # replay plays a recording back (--replay)
# The options of `osprey agent` that a terminal UI has no use for.
HEADLESS_ONLY = ("--replay", "--record", "--events-jsonl", "--no-journal", "--output-schema", "--budget")


class Duration(click.ParamType):
    """`90`, `90s`, `10m`, `1.5h`: seconds, as a float."""

    name = "duration"
    UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip().lower()
        unit = text[-1:] if text[-1:] in ("s", "m", "h") else ""
        try:
            seconds = float(text[: len(text) - len(unit)]) * self.UNITS[unit]
        except ValueError:
            self.fail(f"{value!r} is not a duration such as 90s, 10m or 1h", param, ctx)
        if not 0 < seconds <= 30 * 24 * 3600 or seconds != seconds:
            self.fail(f"{value!r}: a budget is more than 0 and at most 30 days", param, ctx)
        return seconds


DURATION = Duration()


Option = Callable[[Any], Any]


def _session_options(*, headless: bool) -> list[Option]:
    providers = HEADLESS_PROVIDERS if headless else PROVIDERS
    return [
        click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False),
                     help="Working directory (default: the current one; with --resume, the session's own)."),
        click.option("--provider", type=click.Choice(providers),
                     help="Model provider (default: openai, or the resumed session's" + ("; replay with --replay)." if headless else ").")),
        click.option("--model", help="Model name as the provider knows it (default: the provider's, or the resumed session's)."),
        click.option("--base-url", help="API base URL, e.g. http://localhost:8080/v1 for an OpenAI-compatible server."),
        click.option("--effort", type=click.Choice(EFFORTS), help="Reasoning effort, where the model supports it."),
        click.option("--max-turns", type=click.IntRange(min=1),
                     help="Most model turns of one prompt's task before it stops with MaxContinuations "
                          "(default: 150 for `osprey agent`, no limit in the terminal UI)."),
        click.option("--approval-policy", type=click.Choice(POLICIES),
                     help="Which tool calls run without approval (default: deny-untrusted for `osprey agent`, "
                          "on-request in the terminal UI)."),
        click.option("--yolo", is_flag=True, help="Run every tool call without approval (policy never)."),
        click.option("--read-only", is_flag=True,
                     help="Only the trusted read-only tools run without approval: policy deny-untrusted for `osprey agent` "
                          "(nobody can approve), unless-trusted in the terminal UI (you approve anything else)."),
        click.option("--allow", "allow", multiple=True, metavar="RULE",
                     help="Pre-approve calls matching RULE for this session, e.g. 'bash(git diff *)', 'write_file(src/**)', "
                          "'read_file' (repeatable; see `osprey approvals`)."),
        click.option("--toolset", metavar="NAME",
                     help="Offer the model only the tools of toolset NAME (from the nearest toolsets.toml; see `osprey docs extensions`)."),
        click.option("--persona", metavar="NAME",
                     help="Start as persona NAME: .osprey/personas/NAME.md, $OSPREY_HOME/personas/NAME.md, or a bundled one "
                          "(default, coding, architect, verifier); default: [agent].default_persona (see `osprey docs personas`)."),
        click.option("--skill", "skills", multiple=True, metavar="NAME",
                     help="Load skill NAME's instructions into the system prompt from the start (repeatable; it must be discovered)."),
        click.option("--skill-dir", "skill_dirs", multiple=True, type=click.Path(file_okay=False), metavar="DIR",
                     help="One more skill root, after the project's .agents/skills and before your own $OSPREY_HOME/skills "
                          "(repeatable; OSPREY_SKILL_DIR adds one too; see `osprey docs skills`)."),
        click.option("--sandbox", is_flag=True, default=None,
                     help="Run the tools in a sandbox lane (a Docker container that sees only the workspace), removed at the end."),
        click.option("--sandbox-network", is_flag=True, default=None, help="With --sandbox: allow network egress from the lane (off by default)."),
        click.option("--sandbox-socket", type=click.Path(),
                     help="Use a sandbox lane already serving on this unix socket (compose, CI fixtures)."),
        click.option("--sandbox-token-file", type=click.Path(dir_okay=False), help="With --sandbox-socket: the file holding that lane's token."),
        click.option("--sandbox-lane", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Use a lane already running on another machine's engine, as FILE describes it (osprey.testing's lane "
                          "writes one); the workspace is synced with it at the start, on /sync and at the end."),
        click.option("--resume", "resume", metavar="ID",
                     help="Go on with a saved session (its id or a unique start of it; see `osprey sessions list`), with the "
                          "model it ran with and in its working directory unless options say otherwise."),
        click.option("--continue", "continue_", is_flag=True, help="Go on with the newest saved session of the working directory, as --resume does."),
    ]


def _headless_only() -> list[Option]:
    return [
        click.option("--replay", "replay_file", type=click.Path(dir_okay=False),
                     help="(osprey agent only) Play back a recorded session instead of calling a model."),
        click.option("--record", "record_file", type=click.Path(dir_okay=False, writable=True),
                     help="(osprey agent only) Write this session's model turns to FILE for --replay."),
        click.option("--events-jsonl", is_flag=True, help="(osprey agent only) Print JSON Lines events even on a terminal."),
        click.option("--no-journal", "journal", is_flag=True, default=True, flag_value=False,
                     help="(osprey agent only) Do not save this session in $OSPREY_HOME/sessions.db (it then cannot be resumed)."),
        click.option("--output-schema", "output_schema", type=click.Path(dir_okay=False, exists=True), metavar="PATH",
                     help="(osprey agent only) A JSON Schema (Draft 2020-12) the final answer must satisfy: the answer is JSON, "
                          "checked by Osprey; after 3 invalid answers the run ends Error."),
        click.option("--budget", type=DURATION, metavar="DURATION",
                     help="(osprey agent only) Time budget of the session, e.g. 90s, 10m, 1h (a bare number is seconds): "
                          "past it the run ends BudgetExpired (exit 1)."),
    ]


def _apply(function: F, options: list[Option]) -> F:
    for option in reversed(options):
        function = option(function)
    return function


def tui_options(function: F) -> F:
    """The terminal UI's options (the session options)."""
    return _apply(function, _session_options(headless=False))


def agent_options(function: F) -> F:
    """`osprey agent`'s options: the session options, then its own."""
    return _apply(function, [*_session_options(headless=True), *_headless_only()])
