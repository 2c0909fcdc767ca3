"""The project's `.mcp.json`: the MCP servers a repository declares at its root, in the shape other
MCP clients already keep (`{"mcpServers": {NAME: {...}}}`), read boundedly and turned into
`[mcp_servers.NAME]` tables; `${VAR}` and `${VAR:-default}` are expanded from the environment.

Anything in the file is untrusted: an entry that cannot be used is skipped with a reason naming it,
never a crash; a file that cannot be read at all is skipped with a warning."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from ..files import MAX_FILE_BYTES, read_bounded
from .mcp import MAX_SERVERS, MCP_JSON, EnvName, HeaderName, McpSkipped, ServerName, Word, server_name_problem

# ${VAR} or ${VAR:-default}; anything else that starts with `$` is kept as it is.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]{0,100})(?::-([^}]{0,4096}))?\}")
SSE_REASON = ("an SSE server (type \"sse\"), and Osprey speaks streamable HTTP: if the server offers it, "
              "give its streamable HTTP endpoint with type \"http\"")


class McpJsonServer(BaseModel):
    """One entry of `mcpServers`: a stdio server (`command`, `args`, `env`) or an HTTP one (`type`
    "http", `url`, `headers`). Keys other clients add (`timeout`, `description`, ...) are ignored."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["stdio", "http", "sse", "streamable-http"] | None = None
    command: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    args: list[Word] = Field(default_factory=list, max_length=256)
    env: dict[EnvName, Word] = Field(default_factory=dict, max_length=64)
    url: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    headers: dict[HeaderName, Annotated[str, Field(max_length=8192)]] = Field(default_factory=dict, max_length=64)

    def transport(self) -> Literal["stdio", "http", "sse"]:
        if self.type == "sse":
            return "sse"
        if self.type in ("http", "streamable-http") or (self.type is None and self.url and not self.command):
            return "http"
        return "stdio"

    def table(self) -> dict[str, Any]:
        """The `[mcp_servers.NAME]` table it stands for, with `${...}` not yet expanded."""
        if self.transport() == "http":
            return {"url": self.url, **({"http_headers": dict(self.headers)} if self.headers else {})}
        return {"command": self.command, **({"args": list(self.args)} if self.args else {}), **({"env": dict(self.env)} if self.env else {})}

    def expands(self) -> bool:
        """Whether any of its values names a variable (`${VAR}`): reading the person's environment."""
        values = [self.command or "", *self.args, *self.env.values(), self.url or "", *self.headers.values()]
        return any(_VARIABLE.search(v) for v in values)

    def problem(self) -> str | None:
        transport = self.transport()
        if transport == "sse":
            return SSE_REASON
        if transport == "stdio" and not self.command:
            return "a stdio server needs a command"
        if transport == "stdio" and (self.url or self.headers):
            return "a stdio server (command) takes no url or headers; give type \"http\" for an HTTP server"
        if transport == "http" and not self.url:
            return "an HTTP server needs a url"
        if transport == "http" and (self.command or self.args or self.env):
            return "an HTTP server (url) takes no command, args or env"
        return None


@dataclass
class McpJson:
    """`.mcp.json` as read: its usable entries, the ones skipped, and its digest (trust covers it)."""

    path: Path
    digest: str
    servers: dict[str, McpJsonServer] = field(default_factory=dict)
    skipped: list[McpSkipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    relpath: str = MCP_JSON


def read_mcp_json(root: Path) -> tuple[McpJson | None, list[str]]:
    """The workspace's `.mcp.json` (None when there is none or it cannot be used), with warnings."""
    from ..trust import digest

    path = root / MCP_JSON
    try:
        raw = read_bounded(path, "an .mcp.json file", MAX_FILE_BYTES)
    except ConfigError as exc:
        return None, [f"{exc}; it was skipped"]
    if raw is None:
        return None, []
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        return None, [f"{path}: not valid JSON ({why}); its MCP servers were skipped"]
    servers = data.get("mcpServers") if isinstance(data, Mapping) else None
    if not isinstance(servers, Mapping):
        return None, [f"{path}: no \"mcpServers\" object at the top; its MCP servers were skipped"]
    found = McpJson(path, digest(raw))
    for index, (name, entry) in enumerate(servers.items()):
        if index >= MAX_SERVERS:
            found.warnings.append(f"{path}: only the first {MAX_SERVERS} of its {len(servers)} servers were read")
            break
        name_problem = server_name_problem(name)
        if name_problem:
            found.warnings.append(f"{path}: skipped a server: {name_problem}")
            continue
        reason = _entry_problem(entry)
        if reason is None:
            server = McpJsonServer.model_validate(entry)
            reason = server.problem()
            if reason is None:
                found.servers[name] = server
                continue
        found.skipped.append(McpSkipped(name=name, origin="mcp.json", reason=reason))
        found.warnings.append(f"{path}: skipped the server {name!r}: {reason}")
    return found, found.warnings


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, Mapping):
        return "its entry is not an object"
    try:
        McpJsonServer.model_validate(entry)
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'entry'}: {err['msg']}" for err in exc.errors()[:5])
    return None


def expand(text: str, env: Mapping[str, str], missing: list[str]) -> str:
    """`text` with `${VAR}` replaced by the variable's value and `${VAR:-default}` by the value or,
    when the variable is not set, the default; names of unset variables without a default are
    added to `missing` (their text is left as it was)."""

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = env.get(name)
        if value is not None:
            return value
        if default is not None:
            return default
        missing.append(name)
        return match.group(0)

    return _VARIABLE.sub(one, text)


def expand_table(table: Mapping[str, Any], env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """A server table with its command, args, env values, url and header values expanded, and the
    variables it named that are not set (and have no default)."""
    missing: list[str] = []
    out = dict(table)
    for key in ("command", "url"):
        if isinstance(out.get(key), str):
            out[key] = expand(out[key], env, missing)
    if isinstance(out.get("args"), list):
        out["args"] = [expand(a, env, missing) for a in out["args"]]
    for key in ("env", "http_headers"):
        if isinstance(out.get(key), Mapping):
            out[key] = {k: expand(v, env, missing) for k, v in out[key].items()}
    return out, list(dict.fromkeys(missing))


__all__ = ["MCP_JSON", "McpJson", "McpJsonServer", "ServerName", "expand", "expand_table", "read_mcp_json"]
