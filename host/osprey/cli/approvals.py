"""`osprey approvals list|add|revoke|check`: the saved approval rules in $OSPREY_HOME/approvals.toml."""

from __future__ import annotations

import json
import shlex
import sys
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from ..policy.store import ApprovalStore, SavedRule

CWD_OPTION = click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False),
                          help="Working directory whose workspace counts as this project (default: the current one).")


def _fail(message: str) -> NoReturn:
    click.echo(f"osprey: error: {message}", err=True)
    sys.exit(1)


def _warn(message: str) -> None:
    click.echo(f"osprey: warning: {message}", err=True)


def _show(text: str) -> str:
    """Text for a terminal: control characters escaped, never sent raw."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def _context(cwd: str | None) -> tuple[ApprovalStore, Path, Path]:
    """The store, the working directory and its workspace root, found as every osprey command finds them."""
    import os

    from ..config import load_home, workspace_root
    from ..policy.store import ApprovalStore

    here = Path(cwd or os.getcwd()).resolve()
    return ApprovalStore.for_home(load_home(), warn=_warn), here, workspace_root(here)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def approvals() -> None:
    """List, add, revoke and check saved approval rules.

    \b
    Rules (`osprey docs approvals` has the details):
      read_file               every call of a tool
      bash(git diff *)        commands starting with these words
      bash(git status)        exactly this command
      write_file(src/**)      paths under src/ in the workspace
    A bash rule covers a command line only when every command in it
    matches; a trailing * does not cover options that write elsewhere, run
    code or delete (git --output, pytest --basetemp, ...). A path rule
    matches the file that will be opened (symlinks followed) and never
    covers .git, .gitmodules, .osprey or .env unless it names them. Rules
    live in $OSPREY_HOME/approvals.toml, for one project or for every
    workspace.
    """


@approvals.command("list")
@click.option("--all", "all_", is_flag=True, help="Also list the rules saved for other projects.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@CWD_OPTION
def list_(all_: bool, as_json: bool, cwd: str | None) -> None:
    """List the saved rules that apply to this workspace."""
    store, _, workspace = _context(cwd)
    problem = store.problem()
    if problem:
        _fail(f"{problem}. Fix or remove it (`osprey approvals add` moves it aside and starts a new file)")
    rules = store.load()
    shown = [r for r in rules if all_ or r.applies_to(str(workspace))]
    if as_json:
        click.echo(json.dumps([_as_json(r, str(workspace)) for r in shown], indent=2, ensure_ascii=False))
        return
    if not shown:
        click.echo(f"No saved approvals apply to {workspace}." if not all_ else "No saved approvals.")
    else:
        rows = [(r.id, _scope(r, str(workspace)), _show(r.rule), _when(r)) for r in shown]
        widths = [max(len(row[i]) for row in [("ID", "SCOPE", "RULE", "CREATED"), *rows]) for i in range(3)]
        for row in [("ID", "SCOPE", "RULE", "CREATED"), *rows]:
            click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[3])
    hidden = len(rules) - len(shown)
    if hidden:
        click.echo(f"({hidden} more saved for other projects; --all lists them.)")


def _when(rule: SavedRule) -> str:

    created = rule.created
    if created.tzinfo is None:
        return created.isoformat(timespec="seconds")
    return created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _scope(rule: SavedRule, workspace: str) -> str:
    if rule.project is None:
        return "global"
    return "this project" if rule.applies_to(workspace) else _show(rule.project)


def _as_json(rule: SavedRule, workspace: str) -> dict[str, Any]:
    parsed = rule.parsed()
    return {
        "id": rule.id,
        "rule": rule.rule,
        "tool": parsed.tool,
        "pattern": parsed.pattern,
        "project": rule.project,
        "created": rule.created.isoformat(),
        "applies": rule.applies_to(workspace),
    }


@approvals.command()
@click.argument("rule")
@click.option("--project/--global", "project", default=True,
              help="Save for this workspace only (default), or for every workspace.")
@CWD_OPTION
def add(rule: str, project: bool, cwd: str | None) -> None:
    """Save RULE, such as 'bash(git diff *)', so matching calls run without asking. It says what
    the rule covers: a trailing `*` does not cover options that write elsewhere, run code or delete."""
    from ..errors import OspreyError
    from ..policy.rules import describe

    store, _, workspace = _context(cwd)
    before = {r.id for r in store.load()} if store.problem() is None else set()
    try:
        saved = store.add(rule, project=str(workspace) if project else None)
    except (OspreyError, ValueError) as exc:
        _fail(str(exc))
    where = f"for {_show(saved.project)}" if saved.project else "for every workspace"
    verb = "Already saved" if saved.id in before else "Saved"
    click.echo(f"{verb} {_show(saved.rule)} {where} (id {saved.id}; `osprey approvals revoke {saved.id}` removes it).")
    click.echo(_show(describe(saved.parsed())))


@approvals.command()
@click.argument("rule_id", metavar="ID")
def revoke(rule_id: str) -> None:
    """Remove the saved rule with this ID (`osprey approvals list --all` shows the ids)."""
    from ..errors import OspreyError

    store, _, _ = _context(None)
    problem = store.problem()
    if problem:
        _fail(f"{problem}. Nothing was revoked: fix or remove the file")
    try:
        gone = store.revoke(rule_id)
    except OspreyError as exc:
        _fail(str(exc))
    if gone is None:
        _fail(f"no saved rule has the id {_show(rule_id)!r}; `osprey approvals list --all` shows the ids")
    click.echo(f"Revoked {gone.id}: {_show(gone.rule)}.")


@approvals.command(context_settings={"allow_interspersed_args": False})
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@CWD_OPTION
@click.argument("command", nargs=-1, required=True)
def check(as_json: bool, cwd: str | None, command: tuple[str, ...]) -> None:
    """Say whether the hardline floor refuses a bash COMMAND and which saved rule pre-approves it,
    without running it. Exit status 0: the floor allows it; 1: the floor refuses it.

    One argument is the command line as the model would send it; several are its words, quoted
    back as your shell split them (`-- rm -rf "/a b"` is judged as rm -rf '/a b').

    \b
    osprey approvals check -- rm -rf /
    osprey approvals check 'git status && git diff'
    """
    from ..policy import hardline

    line = command[0] if len(command) == 1 else shlex.join(command)
    store, here, workspace = _context(cwd)
    refusal = hardline.check(line)
    saved = store.covering("bash", {"command": line}, cwd=str(here), workspace=str(workspace))
    if as_json:
        click.echo(json.dumps({
            "command": line,
            "refused": refusal is not None,
            "rule": refusal.rule if refusal else None,
            "reason": refusal.reason if refusal else "no hardline rule matches",
            "refused_command": refusal.command if refusal else None,
            "approved_by": saved.id if saved else None,
            "approved_rule": saved.rule if saved else None,
        }, ensure_ascii=False))
    else:
        if refusal:
            click.echo(f"refused by the hardline floor (rule {refusal.rule}): {_show(refusal.reason)}")
            if refusal.command and refusal.command != line:
                click.echo(f"  in: {_show(refusal.command)}")
            click.echo("The floor applies under every approval policy, --yolo included; no saved rule overrides it.")
            if saved:
                click.echo(f"(saved rule {saved.id}, {_show(saved.rule)}, would pre-approve it otherwise.)")
        else:
            click.echo("allowed by the hardline floor (no hardline rule matches).")
            if saved:
                click.echo(f"pre-approved in {workspace} by saved rule {saved.id}: {_show(saved.rule)}")
            else:
                click.echo(f"no saved rule pre-approves it in {workspace}; the approval policy decides (on-request asks).")
    sys.exit(1 if refusal else 0)
