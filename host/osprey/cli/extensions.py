"""`osprey extensions`: every extension artifact the layers hold, and trust for executable ones."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..terminal_text import clean

STATUS_MARK = {"active": "active", "inactive": "INACTIVE", "shadowed": "shadowed", "skipped": "SKIPPED", "pending_reload": "pending reload"}


def _fail(message: str) -> None:
    click.echo(f"osprey: error: {message}", err=True)
    sys.exit(1)


def _discover(cwd: str | None) -> tuple[Any, Any]:
    from ..config import load_settings
    from ..errors import OspreyError
    from ..extensions.discovery import discover
    from ..tools import base_tools

    try:
        settings = load_settings(cwd, {}, need_provider=False)
    except OspreyError as exc:
        _fail(str(exc))
    found = discover(settings, {tool.name for tool in base_tools(host_processes=True)})
    found.artifacts.extend(_workflows(settings))
    return settings, found


def _workflows(settings: Any) -> list[Any]:
    """The workflow files (`.osprey/workflows/*.js`, `$OSPREY_HOME/workflows/*.js`, the bundled
    ones) as report entries; a project one (or one the agent wrote) needs a trust pin."""
    from ..agents.workflows.discovery import discover_workflows
    from ..extensions.report import Artifact

    entries = []
    for item in discover_workflows(settings.workspace_root, settings.home, cwd=settings.cwd):
        pinned = item.digest is not None
        entries.append(Artifact(kind="workflow", name=item.name, layer=item.scope, path=str(item.path), status=item.status,
                                trust=item.trust if pinned else "not_required", digest=item.digest, reason=item.why_not,
                                runs=[item.description] if item.description else []))
    return entries


@click.group(invoke_without_command=True)
@click.option("-C", "--cwd", type=click.Path(exists=True, file_okay=False), help="Working directory (default: the current one).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (a stable schema: schema_version 1).")
@click.pass_context
def extensions(ctx: click.Context, cwd: str | None, as_json: bool) -> None:
    """Show every extension artifact: custom tools, hooks, prompts, tool descriptions, toolsets,
    workflows and configuration, from the project's .osprey directories, $OSPREY_HOME and the
    bundled set; then the declared MCP servers, which run and which are skipped and why
    (without starting them: `osprey mcp list` does).

    \b
    For each: its layer and path, the farther copies it shadows, trust (for the
    executable kinds, tools and hooks), status, provenance, digest, when a change
    takes effect, and why it is not active. `pending reload` marks one changed
    since a session running in this directory loaded it. `osprey docs extensions`
    explains the layers and the rules.
    """
    ctx.ensure_object(dict)
    ctx.obj["cwd"] = cwd
    if ctx.invoked_subcommand is not None:
        return
    from ..extensions.loaded import mark_pending, running_loads
    from ..extensions.report import mcp_entries

    settings, found = _discover(cwd)
    report = found.report(settings)
    report.mcp_servers = mcp_entries(settings.mcp)
    mark_pending(report, running_loads(settings.home, settings.cwd))
    if as_json:
        click.echo(report.model_dump_json(indent=2))
        return
    click.echo(f"workspace {report.workspace_root}")
    click.echo("layers, nearest first: " + (", ".join(f"{layer['kind']} {layer['path']}" for layer in report.layers) or "(none)"))
    if not report.artifacts:
        click.echo("no extension artifacts found")
    for item in report.artifacts:
        trust = f" · trust {item.trust}" if item.trust != "not_required" else ""
        provenance = f" · written by the {item.provenance}" if item.provenance == "agent" else ""
        click.echo(f"{STATUS_MARK[item.status]:<9} {item.kind:<20} {item.name}  ({item.layer}){trust}{provenance}")
        click.echo(f"          {item.path}")
        if item.runs:
            click.echo(f"          {'does' if item.kind == 'workflow' else 'runs'}: {' | '.join(clean(line) for line in item.runs)[:300]}")
        for shadowed in item.shadowed:
            click.echo(f"          shadows {shadowed}")
        if item.reason:
            click.echo(f"          why: {item.reason}")
        if (command := found.trust_hint(item) if item.kind != "workflow" else _workflow_hint(item)) is not None:
            click.echo(f"          to trust it once reviewed: {command}")
    if report.mcp_servers:
        click.echo("MCP servers (`osprey mcp list` starts them and lists their tools):")
    for server in report.mcp_servers:
        if server.status == "runs":
            trust = "trusted" if server.trusted else "not trusted: its readOnlyHint is ignored"
            click.echo(f"{'runs':<9} {'mcp_server':<20} {server.name}  ({server.origin}, {server.transport}) · {trust}")
            click.echo(f"          {'runs' if server.transport == 'stdio' else 'url'}: {clean(server.runs or '')[:300]}")
        else:
            click.echo(f"{'SKIPPED':<9} {'mcp_server':<20} {server.name}  ({server.origin})")
            click.echo(f"          why: {server.reason}")
    if report.running_sessions:
        click.echo(f"compared with what the running session{'s' if len(report.running_sessions) > 1 else ''} "
                   f"{', '.join(report.running_sessions)} loaded")
    click.echo(f"[extensions] trust_agent_authored = {'true' if report.trust_agent_authored else 'false'} (governs no behavior yet: "
               "agent-written tools and hooks need `osprey extensions trust` either way)")
    for warning in report.warnings:
        click.echo(f"osprey: warning: {warning}", err=True)


def _workflow_hint(item: Any) -> str | None:
    if item.status != "inactive" or item.digest is None:
        return None
    return f"osprey extensions trust {item.name}"


@extensions.command()
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Trust without asking (required when there is no terminal to ask on).")
@click.pass_context
def trust(ctx: click.Context, name: str, yes: bool) -> None:
    """Trust the executable artifact NAME (a custom tool's name, `hooks`, a workflow's name, or a
    path): show its digest and what it runs, ask, then record the pin in $OSPREY_HOME/trust.toml.

    The pin covers the artifact's bytes and the bytes of every workspace file
    its commands name (the program, an interpreter's script, `--option=FILE`;
    the path of a program outside it): any change makes it `modified` and
    inactive until trusted again, and each run checks those files again first.
    A command that runs inline code or code found by a lookup (`sh -c`,
    `python3 -m`, `$VAR` paths) cannot be pinned, and is refused.
    """
    from ..errors import OspreyError
    from ..trust import pin_artifact

    settings, found = _discover(ctx.obj.get("cwd"))
    wanted = "hooks.toml" if name == "hooks" else name
    pinned = ("tool", "hooks", "workflow")
    candidates = [a for a in found.find(wanted) if a.kind in pinned and a.status != "skipped" and (a.kind != "workflow" or a.digest is not None)]
    if not candidates:
        unusable = [a for a in found.find(wanted) if a.kind in pinned and a.status == "skipped"]
        if unusable:
            _fail("\n".join(f"{a.path} cannot be trusted: {a.reason}" for a in unusable))
        executable = sorted({a.name for a in found.artifacts if a.kind in ("tool", "hooks") or (a.kind == "workflow" and a.digest is not None)})
        _fail(f"no custom tool, hooks file or workflow named {name!r} was found" + (f"; found: {', '.join(executable)}" if executable else ""))
    if len(candidates) > 1:
        untrusted = [a for a in candidates if a.trust != "trusted"]
        if len(untrusted) != 1:
            _fail(f"{name!r} names several artifacts; give one's path:\n  " + "\n  ".join(a.path for a in candidates))
        candidates = untrusted
    [item] = candidates
    if item.trust == "trusted":
        click.echo(f"{item.path} is already trusted ({item.digest})")
        return
    if item.layer == "bundled" or item.digest is None:
        _fail(f"{item.path} cannot be pinned")
    click.echo(f"{item.kind} {item.name} ({item.layer})")
    click.echo(f"  file:   {item.path}")
    for command in item.runs:
        click.echo(f"  {'does' if item.kind == 'workflow' else 'runs'}:   {clean(command)}")
    click.echo(f"  digest: {item.digest}")
    if item.trust == "modified":
        click.echo("  it changed since it was last trusted")
    if not yes:
        if not sys.stdin.isatty():
            _fail("there is no terminal to ask on: review the above, then run again with --yes")
        if not click.confirm("Trust it, and let it run in your sessions?", default=False):
            click.echo("not trusted")
            sys.exit(1)
    from pathlib import Path

    from ..extensions.layers import Layer

    layer = next(layer for layer in found.layers if Path(item.path).is_relative_to(layer.root))
    assert isinstance(layer, Layer)
    root = Path(settings.workspace_root).resolve()
    try:
        where = pin_artifact(settings.home, layer.scope(root), layer.key(Path(item.path), root), item.digest)
    except OspreyError as exc:
        _fail(str(exc))
    click.echo(f"trusted; the pin is in {where}")
