"""`osprey agent PROMPT`: one headless session. Heavy imports happen inside the command."""

from __future__ import annotations

import sys

import click

from .options import agent_options


@click.command()
@click.argument("prompt", required=False)
@agent_options
def agent(prompt: str | None, **options: object) -> None:
    """Run the agent loop headless on PROMPT (or on standard input when PROMPT is - or absent).

    \b
    The session options mean the same as in the terminal UI (`osprey --help`);
    those marked "osprey agent only" are this command's alone.
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
    from . import use_no_pydantic_plugins, work_over

    use_no_pydantic_plugins()
    status = run_headless(prompt, options)
    work_over()  # the session has closed: its journal, dispatcher and lane are done with
    sys.exit(status)
