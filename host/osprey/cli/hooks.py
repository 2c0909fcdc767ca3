"""`osprey hooks import-claude`: a Claude Code settings.json `hooks` block as hooks.toml entries
in the claude dialect."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import click

# A settings.json is small; one larger than this is not read.
MAX_SETTINGS_BYTES = 1024 * 1024


def _fail(message: str) -> NoReturn:
    click.echo(f"osprey: error: {message}", err=True)
    sys.exit(1)


def _warn(message: str) -> None:
    click.echo(f"osprey: warning: {message}", err=True)


def _shown(text: str, limit: int = 120) -> str:
    out = "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def claude_hooks_to_toml(settings: Mapping[str, Any], *, source: str, warn: Callable[[str], None]) -> str:
    """hooks.toml text for the `hooks` block of a Claude Code settings object: every group with
    `dialect = "claude"`, its matcher kept, each command hook's `timeout` (seconds) as
    `timeout_secs`. What hooks.toml cannot express is skipped, each with a warning. Raises
    ValueError when there is no usable `hooks` block."""
    from ..extensions.hooks import EVENTS, MAX_TIMEOUT_SECS
    from ..tomlfile import toml_string

    block = settings.get("hooks")
    if block is None:
        raise ValueError(f"{source} has no \"hooks\" block")
    if not isinstance(block, Mapping):
        raise ValueError(f"the \"hooks\" block of {source} is not an object")
    out = [f"# Imported from {source} by `osprey hooks import-claude`; Claude Code's tool names,",
           "# inputs and matcher rules apply to these groups (dialect = \"claude\")."]
    groups = 0
    for event, entries in block.items():
        where = f"hooks.{_shown(str(event), 60)}"
        if event not in EVENTS:
            warn(f"{where}: Osprey has no {_shown(str(event), 60)} event; skipped")
            continue
        if not isinstance(entries, list):
            warn(f"{where}: not a list of matcher groups; skipped")
            continue
        for n, group in enumerate(entries):
            here = f"{where}[{n}]"
            if not isinstance(group, Mapping):
                warn(f"{here}: not an object; skipped")
                continue
            for key in group:
                if key not in ("matcher", "hooks"):
                    warn(f"{here}: the field {_shown(str(key), 40)!r} has no hooks.toml equivalent; ignored")
            matcher = group.get("matcher")
            if matcher is not None and not isinstance(matcher, str):
                warn(f"{here}: the matcher is not a string; skipped")
                continue
            commands: list[tuple[str, int | None]] = []
            hooks = group.get("hooks")
            for m, hook in enumerate(hooks if isinstance(hooks, list) else []):
                spot = f"{here}.hooks[{m}]"
                if not isinstance(hook, Mapping):
                    warn(f"{spot}: not an object; skipped")
                    continue
                kind = hook.get("type", "command")
                if kind != "command":
                    warn(f"{spot}: hooks of type {_shown(str(kind), 40)!r} cannot run in Osprey (only \"command\"); skipped")
                    continue
                command = hook.get("command")
                if not isinstance(command, str) or not command.strip():
                    warn(f"{spot}: no command; skipped")
                    continue
                for key in hook:
                    if key not in ("type", "command", "timeout"):
                        warn(f"{spot}: the field {_shown(str(key), 40)!r} has no hooks.toml equivalent; ignored")
                timeout = hook.get("timeout")
                seconds: int | None = None
                if timeout is not None:
                    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
                        warn(f"{spot}: the timeout {_shown(repr(timeout), 40)} is not a positive number of seconds; Osprey's default applies")
                    else:
                        seconds = min(max(1, math.ceil(timeout)), MAX_TIMEOUT_SECS)
                        if seconds != timeout:
                            warn(f"{spot}: the timeout {timeout!r} s became {seconds} s (whole seconds, at most {MAX_TIMEOUT_SECS})")
                commands.append((command, seconds))
            if not commands:
                warn(f"{here}: no command hooks left; the group is skipped")
                continue
            groups += 1
            out.append("")
            out.append(f"[[hooks.{event}]]")
            if matcher:
                out.append(f"matcher = {toml_string(matcher)}")
            out.append('dialect = "claude"')
            for command, seconds in commands:
                out.append("")
                out.append(f"[[hooks.{event}.hooks]]")
                out.append(f"command = {toml_string(command)}")
                if seconds is not None:
                    out.append(f"timeout_secs = {seconds}")
    if not groups:
        raise ValueError(f"{source} holds no hooks Osprey can run")
    return "\n".join(out) + "\n"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def hooks() -> None:
    """Work with lifecycle hooks (hooks.toml). `osprey docs hooks` describes them."""


@hooks.command("import-claude")
@click.argument("path", required=False)
@click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False),
              help="Working directory: where .claude/settings.json is looked for, relative PATHs start, and --write writes (default: the current one).")
@click.option("--write", is_flag=True, help="Write .osprey/hooks.toml in the working directory instead of printing it.")
@click.option("--force", is_flag=True, help="With --write: replace an existing .osprey/hooks.toml.")
def import_claude(path: str | None, cwd: str | None, write: bool, force: bool) -> None:
    """Turn the hooks of a Claude Code settings.json into hooks.toml entries.

    \b
    PATH defaults to .claude/settings.json in the working directory. The
    groups keep their matchers and timeouts and get dialect = "claude", so
    the same scripts see Claude Code's tool names and inputs. What Osprey
    cannot run (other hook types, events it does not have) is skipped with
    a warning. Project hooks run only once their trust pin is recorded.
    """
    import os

    from ..extensions.hooks import HooksError, parse_hooks

    here = Path(cwd or os.getcwd()).resolve()
    settings_path = here / (path or ".claude/settings.json")
    from ..files import FileRefused, read_file

    # The workspace's file: never read past the bound, and a FIFO planted there never blocks.
    try:
        data = read_file(settings_path, MAX_SETTINGS_BYTES, follow_symlinks=True)
    except FileRefused as exc:
        if exc.reason == "too_large":
            _fail(f"{settings_path} is larger than {MAX_SETTINGS_BYTES} bytes; that is not a settings file")
        if exc.reason == "not_regular":
            _fail(f"{settings_path} is not a regular file; that is not a settings file")
        _fail(f"{settings_path} cannot be read: {exc.strerror}")
    if data is None and settings_path.is_dir():
        _fail(f"{settings_path} cannot be read: Is a directory")
    if data is None:
        _fail(f"{settings_path} does not exist; name the settings file: osprey hooks import-claude PATH")
    try:
        settings = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        _fail(f"{settings_path} is not JSON: {_shown(str(exc))}")
    if not isinstance(settings, dict):
        _fail(f"{settings_path} does not hold a JSON object")
    shown_source = path or ".claude/settings.json"
    try:
        text = claude_hooks_to_toml(settings, source=shown_source, warn=_warn)
    except ValueError as exc:
        _fail(str(exc))
    try:
        parse_hooks(text.encode("utf-8"), source="the imported hooks")
    except HooksError as exc:
        _fail(f"the imported hooks would not be a valid hooks.toml: {exc}")
    if not write:
        click.echo(text, nl=False)
        return
    from ..tomlfile import write_atomic

    target = here / ".osprey" / "hooks.toml"
    if (target.exists() or target.is_symlink()) and not force:
        _fail(f"{target} already exists; merge by hand, or pass --force to replace it")
    if target.is_symlink():
        _fail(f"{target} is a symbolic link; remove it first")
    try:
        write_atomic(target, text)
    except OSError as exc:
        _fail(f"{target} cannot be written: {exc.strerror or exc}")
    click.echo(f"Wrote {target}. Project hooks stay inactive until their trust pin is recorded (`osprey extensions`).")
