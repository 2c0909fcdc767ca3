"""`osprey sessions`: the sessions saved in the journal, and their transcripts."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..numbers import counted

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ..events import Event, ToolCallEvent

# Control characters from a model or a workspace must not reach the terminal as escape sequences.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
PREVIEW_LINES = 6
PREVIEW_CHARS = 2000
DIR_CHARS = 40
LABEL_CHARS = 60  # of a call's first argument, where a result names its call


def _clean(text: str) -> str:
    return _CONTROL.sub("\ufffd", text)


def _path() -> Path:
    from ..config import load_home
    from ..sessions.journal import journal_path

    return journal_path(load_home())


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@click.group()
def sessions() -> None:
    """List, show, rename, fork and delete the saved sessions.

    \b
    Every session is saved in $OSPREY_HOME/sessions.db as it runs (one
    closed without a prompt is not kept); `osprey --resume ID` (the terminal
    UI) or `osprey agent --resume ID "PROMPT"` goes on with one, with the
    model it ran with.
    """


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of objects.")
@click.option("--all", "all_dirs", is_flag=True, help="Sessions of every working directory, not only this one.")
@click.option("-C", "--cwd", type=click.Path(file_okay=False), help="The working directory whose sessions to list (default: the current one).")
def list_command(as_json: bool, all_dirs: bool, cwd: str | None) -> None:
    """The sessions run in this working directory (or all) that have a prompt, newest first."""
    from ..sessions.journal import JournalError, list_sessions

    where = None if all_dirs else str(Path(cwd or os.getcwd()).resolve())
    try:
        rows = list_sessions(_path(), where)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps([row.model_dump() for row in rows], ensure_ascii=False, indent=2))
        return
    if not rows:
        scope = "anywhere" if where is None else f"in {where} (--all lists every directory's)"
        click.echo(f"no saved sessions {scope}")
        return
    dirs = [_short_dir(row.cwd) for row in rows]
    width = max(len("DIRECTORY"), *(len(d) for d in dirs))
    click.echo(f"{'ID':<12}  {'UPDATED':<16}  {'DIRECTORY':<{width}}  {'OUTCOME':<17}  TITLE")
    for row, directory in zip(rows, dirs, strict=True):
        click.echo(f"{row.id:<12}  {_when(row.updated):<16}  {directory:<{width}}  {(row.outcome or '-'):<17}  {_clean(row.title)}")


def _short_dir(path: str, limit: int = DIR_CHARS) -> str:
    """A working directory for the table: `~` for the home directory, its end kept when too long."""
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and (path == home or path.startswith(home + os.sep)):
        path = "~" + path[len(home):]
    path = _clean(path)
    return path if len(path) <= limit else "…" + path[-(limit - 1):]


@sessions.command("show")
@click.argument("session_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the session's events as JSON Lines.")
@click.option("--full", is_flag=True, help="Print every tool call's arguments and result whole (by default a result shows its first 6 lines).")
def show_command(session_id: str, as_json: bool, full: bool) -> None:
    """The transcript of session ID (its full id, or the start of it)."""
    from ..sessions.journal import JournalError, find_session, load_events, read_events

    path = _path()
    try:
        row = find_session(path, session_id)
        if as_json:
            # The record as it is stored, key for key.
            for data in load_events(path, row.id):
                click.echo(json.dumps(data, ensure_ascii=False))
            return
        events = read_events(path, row.id)
        children = _children(path, row.id)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"session {row.id}  {_clean(row.cwd)}  {row.provider}/{_clean(row.model)}  started {_when(row.created)}")
    if children:
        click.echo(f"{counted(len(children), 'child session')} (`osprey sessions show ID` shows one):")
        for line in children:
            click.echo(line)
    for line in _transcript(events, full=full):
        click.echo(line)


MAX_CHILDREN_SHOWN = 200


def _children(path: Path, session_id: str) -> list[str]:
    """The sessions `session_id` started and theirs, one line each, indented by depth: id,
    persona, outcome, turns and tokens (from each one's last ending), and its first prompt."""
    import sqlite3

    from ..sessions.journal import JournalError, reader, session_tree

    tree = session_tree(path, session_id, limit=MAX_CHILDREN_SHOWN + 1)[1:]
    if not tree:
        return []
    conn = reader(path)
    lines = []
    try:
        for depth, child in tree[:MAX_CHILDREN_SHOWN]:
            start = conn.execute("SELECT data FROM events WHERE session_id = ? AND type = 'session_start' ORDER BY seq LIMIT 1", (child.id,)).fetchone()
            end = conn.execute("SELECT data FROM events WHERE session_id = ? AND type IN ('task_end', 'session_end') ORDER BY seq DESC LIMIT 1",
                               (child.id,)).fetchone()
            persona = str(json.loads(start[0]).get("persona") or "-") if start else "-"
            ending = json.loads(end[0]) if end else {}
            usage = ending.get("usage") or {}
            spent = (f"{counted(int(ending.get('turns') or 0), 'turn')}, tokens {int(usage.get('input_tokens') or 0):,} in / "
                     f"{int(usage.get('output_tokens') or 0):,} out") if ending else "no task ended"
            title = " ".join(_clean(child.title).split())[:LABEL_CHARS]
            lines.append(f"{'  ' * depth}{child.id}  {_clean(persona)}  {child.outcome or 'running'}  {spent}  {title}")
    except (sqlite3.Error, ValueError) as exc:
        raise JournalError(f"cannot read the child sessions of {session_id} from the journal {path}: {exc}") from None
    finally:
        conn.close()
    if len(tree) > MAX_CHILDREN_SHOWN:
        lines.append(f"  ... (more than {MAX_CHILDREN_SHOWN})")
    return lines


@sessions.command("rename")
@click.argument("session_id", metavar="ID")
@click.argument("title")
def rename_command(session_id: str, title: str) -> None:
    """Set the title of session ID (its full id, or the start of it) to TITLE."""
    from ..sessions.journal import JournalError
    from ..sessions.manage import rename_session

    try:
        row = rename_session(_path(), session_id, title)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"session {row.id} is now titled: {_clean(row.title)}")


@sessions.command("fork")
@click.argument("session_id", metavar="ID")
def fork_command(session_id: str) -> None:
    """Start a new session whose history is session ID's as saved now; ID stays as it was.
    `osprey --resume NEW_ID` goes on with the fork."""
    from ..sessions.journal import JournalError
    from ..sessions.manage import fork_session

    try:
        row = fork_session(_path(), session_id)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"forked {session_id} as session {row.id}; `osprey --resume {row.id}` goes on with it")


@sessions.command("delete")
@click.argument("session_id", metavar="ID")
@click.option("--yes", is_flag=True, help="Delete without asking (needed when not on a terminal).")
def delete_command(session_id: str, yes: bool) -> None:
    """Delete session ID, the sessions it started, their events and their stored tool outputs
    ($OSPREY_HOME/results/ID). It cannot be undone."""
    import sys

    from ..config import load_home
    from ..sessions.journal import JournalError, find_session
    from ..sessions.manage import delete_session, results_root, session_and_children

    path = _path()
    try:
        row = find_session(path, session_id)
        ids = session_and_children(path, row.id)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    children = len(ids) - 1
    what = f"session {row.id} ({_clean(row.title) or 'no title'})" + (f" and {counted(children, 'child session')}" if children else "")
    if not yes:
        if not sys.stdin.isatty():
            raise click.ClickException(f"not deleting {what}: not on a terminal to confirm; add --yes to delete it")
        if not click.confirm(f"Delete {what}? This cannot be undone", default=False):
            click.echo("nothing was deleted")
            return
    try:
        gone = delete_session(path, row.id, results=results_root(load_home()))
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"deleted {counted(len(gone), 'session')}: {', '.join(gone)}")


def _preview(text: str, *, full: bool = False) -> str:
    if full:
        return "\n".join("    " + line for line in _clean(text).splitlines())
    lines = _clean(text[:PREVIEW_CHARS]).splitlines()
    more = len(lines) > PREVIEW_LINES or len(text) > PREVIEW_CHARS
    shown = "\n".join("    " + line for line in lines[:PREVIEW_LINES])
    return shown + ("\n    ..." if more else "")


def _transcript(events: Iterable[Event], *, full: bool = False) -> Iterator[str]:
    """The transcript's lines. A tool result whose call is not the line just before it (calls run
    together show their calls first) names its call by its tool and first argument."""
    from ..events import ToolCallEvent, ToolResultEvent

    waiting: dict[str, list[ToolCallEvent]] = {}  # calls without a result yet, by id (a model may repeat one)
    previous: Event | None = None  # the event of the last line shown
    for event in events:
        call: ToolCallEvent | None = None
        if isinstance(event, ToolCallEvent):
            waiting.setdefault(event.id, []).append(event)
        elif isinstance(event, ToolResultEvent) and event.id in waiting:
            call = waiting[event.id].pop(0)
            if not waiting[event.id]:
                del waiting[event.id]
        line = _transcript_line(event, full=full, call=_call_label(call) if call is not None and call is not previous else None)
        if line:
            previous = event
            yield line


def _call_label(call: ToolCallEvent) -> str:
    """A call in a few words: its tool and its first argument (shortened)."""
    if not call.arguments:
        return f"{call.name} {{}}"
    key, value = next(iter(call.arguments.items()))
    shown = json.dumps(value, ensure_ascii=False)
    if len(shown) > LABEL_CHARS:
        shown = shown[:LABEL_CHARS] + "..."
    more = ", ..." if len(call.arguments) > 1 else ""
    return f"{call.name} {{{json.dumps(key, ensure_ascii=False)}: {shown}{more}}}"


def _transcript_line(e: Event, *, full: bool = False, call: str | None = None) -> str:
    """One event of the transcript (empty for an event it does not show); `full` keeps tool
    arguments and results whole; `call` names a result's call in place of its tool alone."""
    from ..events import AssistantText, Notice, SessionEnd, SessionStart, TaskEnd, ToolCallEvent, ToolResultEvent, UserMessageEvent

    if isinstance(e, SessionStart):
        return f"--- session started: {_clean(e.provider)}/{_clean(e.model)}, {_clean(e.approval_policy)}, tools {_clean(e.tool_service)}"
    if isinstance(e, UserMessageEvent):
        who = "you" if e.origin == "user" else "osprey"
        return f"\n{who}> {_clean(e.text)}"
    if isinstance(e, AssistantText):
        return f"\nassistant> {_clean(e.text)}" if e.text else ""
    if isinstance(e, ToolCallEvent):
        arguments = json.dumps(e.arguments, ensure_ascii=False)
        if not full and len(arguments) > 300:
            arguments = arguments[:300] + "..."
        return f"  -> {_clean(e.name)} {_clean(arguments)}"
    if isinstance(e, ToolResultEvent):
        from ..messages import recorded_image_notes

        status = "ok" if e.ok else f"error ({e.error_category})"
        # A note for each image it returned (its data is never printed).
        notes = "".join(f"\n    {_clean(note)}" for note in recorded_image_notes(e.images))
        return f"  <- {_clean(call or e.name)}: {_clean(status)}" + (f"\n{_preview(e.output, full=full)}" if e.output else "") + notes
    if isinstance(e, Notice):
        return f"  [{e.level}] {_clean(e.message)}"
    if isinstance(e, TaskEnd):
        error = f": {_clean(e.error)}" if e.error else ""
        return f"--- task ended: {_clean(e.outcome)}{error}"
    if isinstance(e, SessionEnd):
        return f"--- session ended: {_clean(e.outcome)} after {counted(e.turns, 'turn')}"
    return ""


from . import sessions_search  # noqa: E402, F401 - adds `osprey sessions search` to the group above
