"""`osprey agent PROMPT`: one headless session. Heavy imports happen inside the command."""

from __future__ import annotations

import sys

import click

from ..policy import POLICIES

PROVIDERS = ["openai", "anthropic", "replay"]


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
EFFORTS = ["minimal", "low", "medium", "high"]


@click.command()
@click.argument("prompt", required=False)
@click.option("--provider", type=click.Choice(PROVIDERS), help="Model provider (default: openai; replay with --replay).")
@click.option("--model", help="Model name as the provider knows it.")
@click.option("--base-url", help="API base URL, e.g. http://localhost:8080/v1 for an OpenAI-compatible server.")
@click.option("--effort", type=click.Choice(EFFORTS), help="Reasoning effort, where the model supports it.")
@click.option("--max-turns", type=click.IntRange(min=1), help="Most model turns before the run stops with MaxContinuations (default 150).")
@click.option("--replay", "replay_file", type=click.Path(dir_okay=False), help="Play back a recorded session instead of calling a model.")
@click.option("--record", "record_file", type=click.Path(dir_okay=False, writable=True), help="Write this session's model turns to FILE for --replay.")
@click.option("--events-jsonl", is_flag=True, help="Print JSON Lines events even on a terminal.")
@click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory (default: the current one).")
@click.option("--approval-policy", type=click.Choice(POLICIES), help="Which tool calls run without approval (headless default: deny-untrusted).")
@click.option("--yolo", is_flag=True, help="Run every tool call without approval (policy never).")
@click.option("--read-only", is_flag=True, help="Only the trusted read-only tools run (policy deny-untrusted).")
@click.option("--allow", "allow", multiple=True, metavar="RULE", help="Pre-approve calls matching RULE for this run, e.g. 'bash(git diff *)', 'write_file(src/**)', 'read_file' (repeatable; see `osprey approvals`).")
@click.option("--sandbox", is_flag=True, default=None, help="Run the tools in a fresh sandbox lane (a Docker container that sees only the workspace).")
@click.option("--sandbox-network", is_flag=True, default=None, help="With --sandbox: allow network egress from the lane (off by default).")
@click.option("--sandbox-socket", type=click.Path(), help="With --sandbox: use a lane already serving on this unix socket (compose, CI fixtures).")
@click.option("--sandbox-token-file", type=click.Path(dir_okay=False), help="With --sandbox-socket: the file holding that lane's token.")
@click.option("--no-journal", "journal", is_flag=True, default=True, flag_value=False, help="Do not save this session in $OSPREY_HOME/sessions.db (it then cannot be resumed).")
@click.option("--output-schema", "output_schema", type=click.Path(dir_okay=False, exists=True), metavar="PATH", help="A JSON Schema (Draft 2020-12) the final answer must satisfy: the answer is JSON, checked by Osprey; after 3 invalid answers the run ends Error.")
@click.option("--budget", type=DURATION, metavar="DURATION", help="Time budget of the session, e.g. 90s, 10m, 1h (a bare number is seconds): past it the run ends BudgetExpired (exit 1).")
@click.option("--toolset", metavar="NAME", help="Offer the model only the tools of toolset NAME (from the nearest toolsets.toml; see `osprey docs extensions`).")
@click.option("--resume", "resume", metavar="ID", help="Go on with a saved session (see `osprey sessions list`), in its working directory unless -C says otherwise.")
def agent(prompt: str | None, **options: object) -> None:
    """Run the agent loop headless on PROMPT (or on standard input when PROMPT is - or absent).

    \b
    Exit status: 0 when the task completed, 1 when it stopped short
    (MaxContinuations, ActionlessTimeout, a provider error), 2 for a usage
    error, 128 + the signal on Ctrl-C (130), SIGTERM (143) or SIGHUP (129).
    """
    if prompt in (None, "-"):
        if sys.stdin is None or sys.stdin.isatty():
            raise click.UsageError("give a PROMPT, or pipe one on standard input")
        prompt = sys.stdin.read()
    if not prompt or not prompt.strip():
        raise click.UsageError("the prompt is empty")
    from ..headless import run_headless

    sys.exit(run_headless(prompt, **options))  # type: ignore[arg-type]
