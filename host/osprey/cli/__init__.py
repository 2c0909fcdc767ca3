"""The `osprey` command: a root group that loads each subcommand's module only when it runs."""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from .. import __version__
from .options import tui_options
from .tui import given

# httpx imports its own command-line client, and with it rich and pygments (tens of ms), whenever
# they are installed, as the TUI's dependencies are; Osprey never runs it. A None entry makes that
# import fail at once, and httpx falls back to a stub `httpx.main`.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def use_no_pydantic_plugins() -> None:
    """Called before a session's first model is built: Osprey's own process uses no pydantic
    plugins. pydantic looks for them when it builds its first validator, by importing
    importlib.metadata and scanning every installed package's entry points (~20 ms of each start);
    this loader, in its place, finds none. Nothing is set in the environment, so the commands,
    hooks and tools the session starts see pydantic as installed."""
    if "pydantic.plugin._loader" in sys.modules:
        return
    loader = types.ModuleType("pydantic.plugin._loader", "Osprey's process: no pydantic plugins.")
    loader.get_plugins = lambda: ()  # type: ignore[attr-defined]
    sys.modules["pydantic.plugin._loader"] = loader


# Set by a command whose work is over (`osprey agent`, once its session has closed): when it was
# run from the process's own command line, the process then ends at once (`leave`).
_over = False


def work_over() -> None:
    """The command's work is over: nothing is left for the interpreter's teardown to finish."""
    global _over
    _over = True


def leave(status: int) -> NoReturn:
    """End the process with `status` as an ordinary exit does (the exit handlers run, the standard
    streams are flushed) but without the interpreter's teardown, which frees every module and
    object one by one: 10-30 ms of a one-turn session. With a thread still running, or streams
    that cannot be flushed, the ordinary exit is taken (it waits for the thread, and reports the
    stream)."""
    if any(thread is not threading.main_thread() and not thread.daemon and thread.is_alive() for thread in threading.enumerate()):
        sys.exit(status)
    atexit._run_exitfuncs()  # and they are forgotten: an ordinary exit after this does not run them again
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: the ordinary exit says so and sets the status
            sys.exit(status)
    os._exit(status)


# name -> (module, attribute, one-line help); modules load lazily so --help stays fast.
SUBCOMMANDS = {
    "agent": ("osprey.cli.agent", "agent", "Run the agent loop headless on one prompt."),
    "approvals": ("osprey.cli.approvals", "approvals", "List, add, revoke and check saved approval rules."),
    "docs": ("osprey.cli.docs", "docs", "Show the documentation: the topics, or one page."),
    "hooks": ("osprey.cli.hooks", "hooks", "Import Claude Code hooks into hooks.toml."),
    "extensions": ("osprey.cli.extensions", "extensions", "List extension artifacts (tools, hooks, prompts, toolsets); trust tools and hooks."),
    "mcp": ("osprey.cli.mcp", "mcp", "List MCP servers with their state and tools; add and remove them."),
    "sandbox": ("osprey.cli.sandbox", "sandbox", "Build the lane image; list and prune sandbox lanes."),
    "sessions": ("osprey.cli.sessions", "sessions", "List saved sessions and show their transcripts."),
    "trust": ("osprey.cli.trust", "trust", "Review a project's settings and trust them; list or revoke trust."),
}


def show_error(exc: click.ClickException) -> None:
    """A click error as every osprey error prints: one `osprey: error: ` prefix (click's own
    `Error: ` left out), after the usage lines for a usage error."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        exc.show()  # a group run without its command: its help, which is no error message
        return
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        ctx = exc.ctx
        hint = ""
        if ctx.command.get_help_option(ctx) is not None:
            hint = f"Try '{ctx.command_path} {max(ctx.command.get_help_option_names(ctx), key=len)}' for help.\n"
        click.echo(f"{ctx.get_usage()}\n{hint}", err=True, color=ctx.color)
    click.echo(f"osprey: error: {exc.format_message()}", err=True)


class LazyGroup(click.Group):
    def __call__(self, *args: Any, **extra: Any) -> Any:
        # The entry points (`osprey`, `python -m osprey`) call the group with no arguments: the
        # command line is the process's own, and once a command's work is over the process may
        # end at once. A caller that passes the arguments (a test, an embedding program) gets the
        # ordinary SystemExit.
        own = not args and "args" not in extra
        try:
            return self.main(*args, **extra)
        except SystemExit as exc:
            if own and _over and (exc.code is None or isinstance(exc.code, int)):
                leave(exc.code or 0)
            raise

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            # Not standalone, so click raises its errors here rather than printing them its way.
            status = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            show_error(exc)
            sys.exit(exc.exit_code)
        # Commands end with sys.exit; an int here is the status of a click Exit (--help, --version).
        sys.exit(status if isinstance(status, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module, attr, _ = SUBCOMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table, so listing commands imports none of them.
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][2]) for name in sorted(SUBCOMMANDS)])


@click.group(cls=LazyGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="osprey")
@tui_options
@click.pass_context
def main(ctx: click.Context, **options: Any) -> None:
    """Osprey: a coding agent whose file and shell tools run behind one gRPC ToolService.

    \b
    Run `osprey` for the terminal UI (the options below are its own), or
    `osprey agent "PROMPT"` for a headless session (JSON Lines when stdout is not a terminal).
    The options mean the same in both; osprey agent alone has
    --replay, --record, --events-jsonl, --no-journal, --output-schema and --budget.
    Configuration: `osprey docs configuration`. Event schema: `osprey docs events`.
    """
    # Before anything runs a command: the commands run as this user, and this process's
    # environment and memory hold the provider's key. (Imported here: `--help` never gets here.)
    from ..process_privacy import make_undumpable

    make_undumpable()
    if ctx.invoked_subcommand is not None:
        if given(options):
            raise click.UsageError(f"--{given(options)[0].replace('_', '-')} is an option of the terminal UI: put a subcommand's options after it")
        return
    from .tui import run_tui

    use_no_pydantic_plugins()
    sys.exit(run_tui(**options))
