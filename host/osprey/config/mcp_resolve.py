"""The MCP servers of one run: `[mcp_servers.NAME]` of every config layer and the project's
`.mcp.json`, merged, judged for trust, and resolved into the servers a session connects to.

Precedence, lowest first: the user's config.toml, `.mcp.json`, the project's `.osprey/config.toml`
files. A table that gives `command` or `url` defines the server anew: how it is started or reached
(`command`, `args`, `env`, `cwd`, `url`, `bearer_token_env_var`, `http_headers`,
`env_http_headers`) comes whole from it; the other keys (`enabled`, the timeouts, the tool lists)
and a table without `command` or `url` override the layers below key by key. A `.mcp.json` entry
always defines its server anew.

A project's server that runs a program (stdio), or that carries the person's environment to a URL
the repository chose (a bearer token, headers, `${VAR}` in `.mcp.json`), needs the project file's
trust (`osprey trust`); a plain project HTTP server runs untrusted (its tools' read-only hints count
for nothing)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr, ValidationError

from .mcp import HTTP_KEYS, STDIO_KEYS, TRANSPORT_KEYS, McpServerConfig, McpServerSpec, McpSkipped, Origin, ResolvedMcp, shown_target
from .mcp_json import McpJson, McpJsonServer, expand_table, read_mcp_json

if TYPE_CHECKING:
    from .layers import Layer, _Sources

RUN_MCP = "run an MCP server's program"
SEND_MCP = "send your tokens or headers to an MCP server"
EXPAND_MCP = "read your environment into an MCP server's settings (${VAR})"
# Your saved approval rules name a server's tools (mcp__NAME__TOOL): another server under that name would inherit them.
REPLACE_MCP = "put another server in the place of one you declared"
ENABLE_MCP = "turn on an MCP server you turned off"
# Control characters in a header's value would split the request (or end up in an error message).
_CONTROL = frozenset(chr(c) for c in (*range(0x20), 0x7F))
_DICT_KEYS = ("env", "http_headers", "env_http_headers")


def overlay(below: Mapping[str, Any], table: Mapping[str, Any]) -> dict[str, Any]:
    """`table` over the merged server `below` (see the module's docstring)."""
    if "command" in table or "url" in table:
        out = {k: v for k, v in below.items() if k not in TRANSPORT_KEYS}
        out.update(table)
        return out
    out = dict(below)
    for key, value in table.items():
        if key in _DICT_KEYS and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _set(server: McpServerConfig | None) -> dict[str, Any]:
    return server.model_dump(exclude_unset=True) if server is not None else {}


def mcp_entry_loosens(entry: Any, below: McpServerConfig | None) -> str | None:
    """Why a project's `[mcp_servers.NAME]` table needs trust over the merged server `below`, or
    None: turning a server off, tuning its timeouts or tool lists, repeating what is below, or a
    plain HTTP server (it runs untrusted) need none."""
    if not isinstance(entry, Mapping):
        return RUN_MCP
    if entry.get("enabled", True) is False:
        return None
    before = _set(below)
    after = overlay(before, entry)
    turned_on = below is not None and not below.enabled and entry.get("enabled") is True
    if any(k in entry and entry[k] != before.get(k) for k in STDIO_KEYS) or ("command" in after and turned_on):
        return RUN_MCP
    sends = any(after.get(k) for k in HTTP_KEYS[1:])
    if sends and (turned_on or any(after.get(k) != before.get(k) for k in HTTP_KEYS)):
        return SEND_MCP
    if turned_on:  # whatever it is (a .mcp.json server too): you turned it off
        return ENABLE_MCP
    if below is not None and (below.command or below.url) and "url" in entry and entry["url"] != below.url:
        return REPLACE_MCP
    return None


def mcp_json_loosens(server: McpJsonServer, below: McpServerConfig | None) -> str | None:
    """Why a `.mcp.json` entry needs trust over the user's server of that name, or None."""
    if server.expands():
        return EXPAND_MCP
    try:
        mine: McpServerConfig | None = McpServerConfig.model_validate(server.table())
    except ValidationError:
        mine = None
    same = mine is not None and below is not None and below.enabled and all(getattr(below, k) == getattr(mine, k) for k in TRANSPORT_KEYS)
    if server.transport() == "stdio":
        return None if same else RUN_MCP
    if server.headers and not same:
        return SEND_MCP
    return REPLACE_MCP if below is not None and (below.command or below.url) and below.url != server.url else None


def _user_servers(layers: list[Layer]) -> dict[str, McpServerConfig]:
    """The servers of the user's own config files, merged."""
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        if layer.project or layer.dotenv or layer.path is None:
            continue
        for name, table in (layer.data.get("mcp_servers") or {}).items():
            merged[name] = overlay(merged.get(name, {}), table)
    out = {}
    for name, data in merged.items():
        try:
            out[name] = McpServerConfig.model_validate(data)
        except ValidationError:
            continue
    return out


def mcp_json_guarded(mcp_json: McpJson, layers: list[Layer]) -> list[tuple[str, str, dict[str, Any]]]:
    """The entries of `.mcp.json` that need trust: (name, reason, table as written)."""
    user = _user_servers(layers)
    out = []
    for name, server in mcp_json.servers.items():
        reason = mcp_json_loosens(server, user.get(name))
        if reason:
            out.append((name, reason, server.table()))
    return out


def untrusted_reason(status: str, where: str, reason: str, root: Path) -> str:
    """Why a project's server is ignored, and what to do."""
    if status == "changed":
        return (f"{where} changed since you trusted it, and a project may not {reason} without your trust; "
                f"review it, then run `osprey trust {root}` again")
    return f"{where} is not trusted, and a project may not {reason} without your trust; review it, then run `osprey trust {root}`"


def untrusted_warning(status: str, where: str, key: str, reason: str, root: Path) -> str:
    """The warning of a project's server ignored for want of trust (as for other guarded keys)."""
    if status == "changed":
        return (f"{where}: ignored {key}: the file changed since you trusted it, and a project may not {reason} "
                f"without your trust; review it, then run `osprey trust {root}` again")
    return f"{where}: ignored {key}: a project may not {reason} without your trust; review the file, then run `osprey trust {root}`"


@dataclass
class _Entry:
    data: dict[str, Any]
    origin: Origin
    trusted: bool
    expands: bool = False  # `${VAR}` in its values (.mcp.json)


def resolve_mcp(sources: _Sources, env: Mapping[str, str], warnings: list[str]) -> ResolvedMcp:
    """The servers of one run (called once the layers are judged: a project layer's guarded tables
    not trusted are left out, as `_judge` left them out of the merged settings). Tokens and header
    variables are read from `env`; `${VAR}` in `.mcp.json` only from the real environment and
    $OSPREY_HOME/.env (`sources.user_env`), never from the workspace's `.env`."""
    mcp_json, json_warnings = read_mcp_json(sources.root)
    warnings.extend(json_warnings)
    if mcp_json is None and not any(layer.data.get("mcp_servers") for layer in sources.layers if not layer.dotenv):
        return ResolvedMcp()
    status_of = _status_lookup(sources, warnings)
    current: dict[str, _Entry] = {}
    refused: dict[str, McpSkipped] = {}
    json_done = False

    def add_json(found: McpJson) -> None:
        status = status_of(found.relpath, found.digest)
        for skipped in found.skipped:
            refused[skipped.name] = skipped
        user = {name: McpServerConfig.model_validate(e.data) for name, e in current.items() if _valid(e.data)}
        for name, server in found.servers.items():
            reason = mcp_json_loosens(server, user.get(name))
            if reason and status != "trusted":
                refused[name] = McpSkipped(name=name, origin="mcp.json", reason=untrusted_reason(status, str(found.path), reason, sources.root))
                warnings.append(untrusted_warning(status, str(found.path), f"mcpServers.{name}", reason, sources.root))
                continue
            below = current.get(name)
            current[name] = _Entry(overlay(below.data if below else {}, server.table()), "mcp.json", status == "trusted", server.expands())
            refused.pop(name, None)

    for layer in sources.layers:
        if layer.dotenv or layer.path is None:
            continue
        if layer.project and not json_done:
            json_done = True
            if mcp_json is not None:
                add_json(mcp_json)
        tables = dict(layer.data.get("mcp_servers") or {})
        if not tables:
            continue
        origin: Origin = "project" if layer.project else "user"
        trusted = not layer.project or status_of(layer.relpath, layer.digest) == "trusted"
        if layer.project and not trusted:
            for g in layer.guarded:
                if g.path[0] == "mcp_servers" and len(g.path) == 2:
                    tables.pop(g.path[1], None)
                    refused[g.path[1]] = McpSkipped(name=g.path[1], origin="project", reason=untrusted_reason(
                        status_of(layer.relpath, layer.digest), str(layer.path), g.reason, sources.root))
        for name, table in tables.items():
            below = current.get(name)
            if below is None or "command" in table or "url" in table:
                current[name] = _Entry(overlay(below.data if below else {}, table), origin, trusted)
            else:  # tuning the server below: it keeps its origin and trust
                current[name] = _Entry(overlay(below.data, table), below.origin, below.trusted, below.expands)
            refused.pop(name, None)
    if not json_done and mcp_json is not None:
        add_json(mcp_json)

    servers: list[McpServerSpec] = []
    skipped: list[McpSkipped] = []
    for name, entry in current.items():
        spec_or_reason = _spec(name, entry, env, sources.user_env, sources.root)
        if isinstance(spec_or_reason, McpServerSpec):
            servers.append(spec_or_reason)
            continue
        skipped.append(McpSkipped(name=name, origin=entry.origin, reason=spec_or_reason))
        if spec_or_reason != "disabled" and not spec_or_reason.startswith("no layer"):
            warnings.append(f"MCP server {name!r} ({entry.origin}) does not run: {spec_or_reason}")
    skipped.extend(s for name, s in refused.items() if name not in current)
    return ResolvedMcp(servers=tuple(servers), skipped=tuple(skipped))


def _valid(data: Mapping[str, Any]) -> bool:
    try:
        McpServerConfig.model_validate(data)
    except ValidationError:
        return False
    return True


def _status_lookup(sources: _Sources, warnings: list[str]) -> Callable[[str, str], str]:
    """The trust status of a project file; trust.toml is read at most once, and only if asked."""
    store: list[Any] = []

    def status_of(relpath: str, file_digest: str) -> str:
        from ..trust import load_trust

        if not store:
            store.append(load_trust(sources.home))
            if store[0].problem:
                warnings.append(store[0].problem)
        return str(store[0].status(sources.root, relpath, file_digest))

    return status_of


def _spec(name: str, entry: _Entry, env: Mapping[str, str], expand_env: Mapping[str, str], root: Path) -> McpServerSpec | str:
    """The server a session connects to, or why it does not run (a reason that never holds a
    value read from the environment)."""
    data = entry.data
    if data.get("enabled", True) is False:
        return "disabled"
    if not data.get("command") and not data.get("url"):
        return "no layer says how to start it (command) or reach it (url); give one, or remove the table"
    written = data
    if entry.expands:
        data, missing = expand_table(data, expand_env)
        if missing:
            return (f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set in the environment or $OSPREY_HOME/.env, "
                    f"and its .mcp.json entry names {'it' if len(missing) == 1 else 'them'} without a default (${{VAR:-default}})")
    try:
        server = McpServerConfig.model_validate(data)
    except ValidationError as exc:
        if entry.expands:  # the message would quote what a variable expanded to
            where = ", ".join(dict.fromkeys(".".join(str(p) for p in err["loc"]) or "server" for err in exc.errors()[:5]))
            return f"{where}: not valid once its ${{VAR}} are expanded (the value is not shown); check the variables it names"
        return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'server'}: {err['msg'].removeprefix('Value error, ')}" for err in exc.errors()[:5])
    problem = server.problem()
    if problem:
        return problem
    common: dict[str, Any] = {
        "name": name, "origin": entry.origin, "trusted": entry.trusted,
        "startup_timeout_sec": server.startup_timeout_sec, "tool_timeout_sec": server.tool_timeout_sec,
        "enabled_tools": tuple(server.enabled_tools) if server.enabled_tools is not None else None,
        "disabled_tools": tuple(server.disabled_tools),
        "shown": shown_target(written.get("command"), written.get("args") or (), written.get("url")),
    }
    if server.command:
        cwd = None
        if server.cwd:
            cwd = os.path.normpath(os.path.join(root, server.cwd))
            if cwd != str(root) and not cwd.startswith(str(root).rstrip("/") + "/"):
                return f"cwd {server.cwd!r} is outside the workspace {root}; give a directory beneath it"
        return McpServerSpec(transport="stdio", command=server.command, args=tuple(server.args), env=dict(server.env), cwd=cwd, **common)
    headers = dict(server.http_headers)
    source = {header: f"http_headers.{header}" for header in headers}
    for header, var in server.env_http_headers.items():
        if env.get(var):
            headers[header] = env[var]
            source[header] = f"env_http_headers: the variable {var}"
    if server.bearer_token_env_var:
        token = env.get(server.bearer_token_env_var)
        if not token:
            return f"bearer_token_env_var names {server.bearer_token_env_var}, which is not set: set it in the environment or a .env file"
        headers["Authorization"] = f"Bearer {token}"
        source["Authorization"] = f"bearer_token_env_var: the variable {server.bearer_token_env_var}"
    for header, value in headers.items():
        if not _CONTROL.isdisjoint(value):
            return header_value_problem(header, source[header])
    return McpServerSpec(transport="http", url=server.url, headers={k: SecretStr(v) for k, v in headers.items()}, **common)


def header_value_problem(header: str, source: str) -> str:
    """Why a server whose header `header` (from `source`) holds a control character does not run;
    the value itself is never shown (it may be a token)."""
    return (f"the value of the header {header} ({source}) holds a control character "
            "(a line break, perhaps at its end); remove it (the value is not shown)")
