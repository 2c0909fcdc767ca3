"""`osprey approvals list|add|revoke|check`: the saved approval rules in $OSPREY_HOME/approvals.toml."""

from __future__ import annotations

import json
import shlex
import sys
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ..policy import POLICIES

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
@click.option("--policy", type=click.Choice(POLICIES),
              help="For a TOOL(ARGS) call: the approval policy to judge it under (default: this directory's policy for the terminal UI).")
@CWD_OPTION
@click.argument("command", nargs=-1, required=True)
def check(as_json: bool, policy: str | None, cwd: str | None, command: tuple[str, ...]) -> None:
    """Say whether the hardline floor refuses a bash COMMAND and which saved rule pre-approves it,
    without running it. Exit status 0: the floor allows it; 1: the floor refuses it.

    One argument is the command line as the model would send it; several are its words, quoted
    back as your shell split them (`-- rm -rf "/a b"` is judged as rm -rf '/a b').

    One argument written as a call, TOOL(ARGS), is judged as that tool call: a path for a path
    tool (`write_file(c.txt)`), a command line for bash or process (`bash(git push)`). It says
    whether the call would run, be asked about or be denied, and which rule or policy decides;
    exit status 1 when it would be denied.

    \b
    osprey approvals check -- rm -rf /
    osprey approvals check 'git status && git diff'
    osprey approvals check 'write_file(src/app.py)'
    """
    from ..policy import hardline

    call = _call_shape(command[0]) if len(command) == 1 else None
    if call is not None:
        _check_call(*call, as_json=as_json, policy=policy, cwd=cwd)
        return
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


def _call_shape(text: str) -> tuple[str, str] | None:
    """(tool, what is inside the parentheses) for an argument written as a call, TOOL(ARGS), of a
    tool a rule can name a pattern for; None for anything else (a shell command)."""
    from ..policy.rules import COMMAND_TOOLS, PATH_TOOLS

    stripped = text.strip()
    open_at = stripped.find("(")
    if open_at <= 0 or not stripped.endswith(")"):
        return None
    tool = stripped[:open_at].rstrip()
    if tool not in COMMAND_TOOLS + PATH_TOOLS:
        return None
    return tool, stripped[open_at + 1:-1].strip()


def _check_call(tool: str, inside: str, *, as_json: bool, policy: str | None, cwd: str | None) -> NoReturn:
    """What the hardline floor and the approval policy (with the saved rules) decide for one call."""
    import asyncio

    from ..config import load_settings
    from ..errors import OspreyError
    from ..interception import TRUSTED_READ_ONLY, PendingCall
    from ..policy import hardline
    from ..policy.approvals import ApprovalPolicy
    from ..policy.floor import shell_command
    from ..policy.rules import COMMAND_TOOLS, MAX_PATTERN
    from ..tools.builtin import base_tools

    shown_call = f"{tool}({inside})"
    if not inside:
        _fail(f"{_show(shown_call)} names no {'command' if tool in COMMAND_TOOLS else 'path'}: write the call as {tool}(...)")
    if len(inside) > MAX_PATTERN:
        _fail(f"the call is longer than {MAX_PATTERN} characters")
    store, here, workspace = _context(cwd)
    if policy is None:
        try:
            policy = load_settings(here, need_provider=False, interactive=True).approval_policy
        except OspreyError as exc:
            _fail(str(exc))
        default = " (this directory's policy for the terminal UI; --policy judges under another)"
    else:
        default = ""
    if tool == "process":
        arguments: dict[str, Any] = {"action": "start", "command": inside}
    elif tool == "bash":
        arguments = {"command": inside}
    else:
        arguments = {"path": inside}
    spec = next((t for t in base_tools(host_processes=True) if t.name == tool), None)
    pending = PendingCall(id="check", name=tool, arguments=arguments, tool=spec, turn=0, cwd=str(here), workspace=str(workspace))
    approvals_ = ApprovalPolicy(policy, store=store, workspace=str(workspace))

    refusal = hardline.check(inside) if shell_command(tool, arguments) is not None else None
    verdict = asyncio.run(approvals_.before_call(pending))
    rule = None
    if refusal is not None:
        decision, decided_by = "deny", "hardline floor"
        reason = (f"refused by the hardline floor (rule {refusal.rule}): {refusal.reason.rstrip('.')}. "
                  "The floor applies under every approval policy, --yolo included.")
    elif verdict.action == "allow" and verdict.reason:
        rule = approvals_.covering_rule(pending, saved=policy != "deny-untrusted")
        decision, decided_by = "allow", "saved rule"
        reason = f"pre-approved in {workspace} by the saved rule {rule}"
    elif verdict.action == "allow":
        decision, decided_by = "allow", "approval policy"
        reason = f"the policy {policy} runs {tool} without asking"
    elif verdict.action == "deny":
        decision, decided_by = "deny", "approval policy"
        reason = (f"the policy {policy} runs only the trusted read-only tools ({', '.join(TRUSTED_READ_ONLY)}) without approval, "
                  "and reads no saved rule; `--allow RULE` pre-approves calls for one run")
    else:
        decision, decided_by = "ask", "approval policy"
        reason = f"no saved rule pre-approves it in {workspace}; the policy {policy} asks before {tool} runs"
    if as_json:
        click.echo(json.dumps({
            "call": shown_call, "tool": tool, "arguments": arguments, "policy": policy,
            "decision": decision, "decided_by": decided_by, "rule": rule, "reason": reason,
        }, ensure_ascii=False))
    else:
        click.echo(f"{_show(shown_call)} under the approval policy {policy}{default}:")
        click.echo(f"{decision}: {_show(reason)}")
    sys.exit(1 if decision == "deny" else 0)
