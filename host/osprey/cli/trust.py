"""`osprey trust [DIR]`, `--list`, `--revoke`: review and record trust in a project's files (trust.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

STATUS = {"trusted": "trusted", "changed": "changed since you trusted it", "untrusted": "not trusted"}


def _show(value: Any) -> str:
    """A value as TOML would spell it, with control characters escaped."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def _fail(message: str) -> None:
    click.echo(f"osprey: error: {message}", err=True)
    sys.exit(1)


@click.command()
@click.argument("directory", metavar="[DIR]", required=False)
@click.option("--yes", "-y", is_flag=True, help="Trust without asking (required when there is no terminal to ask on).")
@click.option("--list", "list_", is_flag=True, help="List trusted projects and whether their files still match.")
@click.option("--revoke", is_flag=True, help="Forget the trust recorded for DIR's project.")
def trust(directory: str | None, yes: bool, list_: bool, revoke: bool) -> None:
    """Review what a project's files would change, then trust them.

    \b
    Until you trust them, a project's files (every .osprey/config.toml from the
    workspace root down to DIR, DIR/.env, and the workspace's .mcp.json) may not
    lower the approval policy, turn the sandbox off or open its network, change
    where requests and credentials go, start language servers ([lsp]) or MCP
    servers that run a program or carry your tokens, trust the tools and hooks
    the agent writes, or loosen the shell environment policy. Trust covers the
    files' exact bytes: an edit withdraws it. DIR defaults to the current
    directory; trust is recorded in $OSPREY_HOME/trust.toml.
    """
    from ..config import load_home
    from ..errors import OspreyError

    if list_ and (revoke or directory or yes):
        raise click.UsageError("--list takes no DIR, --revoke or --yes")
    if revoke and yes:
        raise click.UsageError("--revoke asks nothing; drop --yes")
    home = load_home()
    try:
        if list_:
            _list(home)
        elif revoke:
            _revoke(home, directory)
        else:
            _trust(home, directory, yes)
    except OspreyError as exc:
        _fail(str(exc))


def _trust(home: Path, directory: str | None, yes: bool) -> None:
    from ..config import inspect_project
    from ..trust import trust_project

    report = inspect_project(directory)
    if report.trust_problem:
        _fail(f"{report.trust_problem}. Osprey does not rewrite it: fix it, or move it away and trust again")
    if not report.files:
        click.echo(f"No project files (.osprey/config.toml, .env, .mcp.json) in {report.root}: nothing to trust.")
        return
    click.echo(f"Project {report.root}")
    for f in report.files:
        click.echo(f"  {f.relpath}  ({STATUS[f.status]})")
        if not f.guarded:
            click.echo("    nothing guarded: this file works the same without trust")
        for name, value in f.guarded:
            click.echo(f"    {name} = {_show(value)}")
    for note in report.notes:
        click.echo(f"  note: {note}")
    if any(f.guarded for f in report.files):
        click.echo("Trusting lets these files set the values above. Editing any of them withdraws the trust.")
    if not yes:
        if sys.stdin is None or not sys.stdin.isatty():
            _fail("no terminal to ask on, so nothing was trusted; review the list above and rerun with --yes")
        if not click.confirm(f"Trust {'this file' if len(report.files) == 1 else f'these {len(report.files)} files'}?", default=False):
            click.echo("Nothing was trusted.")
            sys.exit(1)
    path = trust_project(home, report.root, {f.relpath: f.digest for f in report.files})
    click.echo(f"Trusted {len(report.files)} file{'s' if len(report.files) != 1 else ''} of {report.root} (recorded in {path}).")


def _list(home: Path) -> None:
    from ..trust import file_state, load_trust

    store = load_trust(home)
    if store.problem:
        _fail(store.problem)
    if not store.data.projects:
        click.echo("No trusted projects.")
        return
    for root, record in sorted(store.data.projects.items()):
        click.echo(f"{root}  (trusted {record.trusted_at.isoformat(timespec='seconds')})")
        for relpath in sorted(record.files):
            click.echo(f"  {relpath}  {file_state(store, root, relpath)}")


def _revoke(home: Path, directory: str | None) -> None:
    import os

    from ..config import workspace_root
    from ..trust import load_trust, revoke_project

    given = Path(os.path.abspath(directory or os.getcwd()))
    known = load_trust(home).data.projects
    if str(given) in known:
        root = given
    else:
        resolved = given.resolve()
        root = resolved if str(resolved) in known or not resolved.is_dir() else workspace_root(resolved)
    if revoke_project(home, root):
        click.echo(f"Revoked the trust of {root}.")
    else:
        click.echo(f"{root} was not trusted; nothing to revoke.")
