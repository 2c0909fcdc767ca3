"""`osprey mcp list|get|add|remove`: the MCP servers of the config files (mcp/manage.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click


def _fail(message: str) -> None:
    click.echo(f"osprey: error: {message}", err=True)
    sys.exit(1)


def _settings(cwd: str | None) -> Any:
    from ..config import load_settings
    from ..errors import OspreyError

    try:
        settings = load_settings(cwd, {}, need_provider=False)
    except OspreyError as exc:
        _fail(str(exc))
    for warning in settings.warnings:
        click.echo(f"osprey: warning: {warning}", err=True)
    return settings


def _probe(settings: Any, names: list[str] | None) -> list[Any]:
    import asyncio

    from ..errors import OspreyError
    from ..mcp.manage import probe

    try:
        return asyncio.run(probe(settings, names=names))
    except OspreyError as exc:  # the home (a lane) could not be started
        _fail(str(exc))
        raise  # unreachable: _fail exits


@click.group()
def mcp() -> None:
    """List, add and remove MCP servers (`osprey docs mcp`).

    \b
    osprey mcp list                           every server, its state and tools
    osprey mcp add NAME -- COMMAND [ARGS...]  a stdio server
    osprey mcp add NAME --url URL             a streamable HTTP server
    osprey mcp remove NAME                    remove one
    add and remove change $OSPREY_HOME/config.toml, or with --project the
    project's .osprey/config.toml.
    """


@mcp.command("list")
@click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory (default: the current one).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: one object per server.")
def list_(cwd: str | None, as_json: bool) -> None:
    """Every declared server: those that do not run with the reason, and the others started
    (stdio ones where the tools run: with the sandbox on, in a lane), given their startup
    timeouts, listed with their tools, and stopped. A server that fails is shown failed, with
    why; the exit status is still 0."""
    from ..mcp.manage import format_reports

    reports = _probe(_settings(cwd), None)
    if as_json:
        click.echo(json.dumps({"servers": [r.as_json() for r in reports]}, indent=2))
    else:
        click.echo(format_reports(reports))


@mcp.command()
@click.argument("name")
@click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory (default: the current one).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def get(name: str, cwd: str | None, as_json: bool) -> None:
    """One server: where it is declared, how it runs, its state and tools."""
    from ..mcp.manage import format_reports

    settings = _settings(cwd)
    known = [s.name for s in settings.mcp.servers] + [s.name for s in settings.mcp.skipped]
    if name not in known:
        _fail(f"no MCP server {name[:80]!r} is declared; the servers: {', '.join(known) or 'none'}")
    reports = _probe(settings, [name])
    click.echo(json.dumps(reports[0].as_json(), indent=2) if as_json else format_reports(reports))


def _target(project: bool, cwd: str | None) -> tuple[Path, Path | None]:
    from ..config import load_home, workspace_root
    from ..mcp.manage import config_file

    root = workspace_root(Path(cwd or ".").resolve()) if project else None
    return config_file(load_home(), root), root


@mcp.command(context_settings={"ignore_unknown_options": False})
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--url", help="The endpoint of a streamable HTTP server (http:// or https://).")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE", help="A variable for a stdio server (repeatable).")
@click.option("--bearer-token-env-var", metavar="VAR", help="The variable holding the bearer token (its name, never the token).")
@click.option("--header", "headers", multiple=True, metavar="'Name: value'", help="A header sent to an HTTP server (repeatable; no credentials).")
@click.option("--env-header", "env_headers", multiple=True, metavar="Name=VAR", help="A header whose value is read from VAR (repeatable).")
@click.option("--project", is_flag=True, help="Write the project's .osprey/config.toml instead of $OSPREY_HOME/config.toml.")
@click.option("--force", is_flag=True, help="Replace a server of that name.")
@click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory, for --project (default: the current one).")
def add(name: str, command: tuple[str, ...], url: str | None, env: tuple[str, ...], bearer_token_env_var: str | None,
        headers: tuple[str, ...], env_headers: tuple[str, ...], project: bool, force: bool, cwd: str | None) -> None:
    """Add a server: `osprey mcp add NAME -- COMMAND [ARGS...]` (stdio) or
    `osprey mcp add NAME --url URL` (streamable HTTP)."""
    from ..errors import OspreyError
    from ..mcp.manage import add_server, check_name, server_table

    try:
        check_name(name)
        table = server_table(command=command, url=url, env=env, bearer_token_env_var=bearer_token_env_var,
                             headers=headers, env_headers=env_headers)
        path, root = _target(project, cwd)
        changed = add_server(path, name, table, force=force)
    except OspreyError as exc:
        _fail(str(exc))
    click.echo(f"{'Replaced' if changed.replaced else 'Added'} the MCP server {name!r} in {_where(path, changed)}.")
    _say_rewritten(changed)
    if root is not None and ("command" in table or len(table) > 1):
        click.echo(f"A project's server that runs a program or carries your tokens runs once you trust the file: `osprey trust {root}`.")


@mcp.command()
@click.argument("name")
@click.option("--project", is_flag=True, help="Remove it from the project's .osprey/config.toml instead of $OSPREY_HOME/config.toml.")
@click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory, for --project (default: the current one).")
def remove(name: str, project: bool, cwd: str | None) -> None:
    """Remove the server NAME from the config file."""
    from ..errors import OspreyError
    from ..mcp.manage import remove_server

    try:
        path, _ = _target(project, cwd)
        changed = remove_server(path, name)
    except OspreyError as exc:
        _fail(str(exc))
    click.echo(f"Removed the MCP server {name!r} from {_where(path, changed)}.")
    _say_rewritten(changed)


def _where(path: Path, changed: Any) -> str:
    return str(path) if changed.written == path else f"{changed.written} (the target of {path})"


def _say_rewritten(changed: Any) -> None:
    if changed.rewritten:
        click.echo(f"Note: {changed.written} declares its MCP servers in a way a line-by-line edit cannot keep apart "
                   "(dotted keys or an inline table), so it was written out from its settings: its values are kept, "
                   "its comments and layout are not.")
