"""MCP servers in the settings: `[mcp_servers.NAME]` as a config layer writes it (the keys Codex
users already write), and the resolved server a session connects to (see `osprey docs mcp`)."""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def server_name_problem(name: str) -> str | None:
    """What is wrong with `name` as a server's name, or None. A server's name is part of its
    tools' names (`mcp__NAME__TOOL`), so `__` in it, or `_` at either end, would make two servers'
    tools read alike (server `a`, tool `b__c`; server `a__b`, tool `c`)."""
    if _SERVER_NAME.match(name) and "__" not in name and not name.startswith("_") and not name.endswith("_"):
        return None
    return (f"{name[:80]!r} is not a server name: 1 to 64 letters, digits, '_' or '-', with no '__' and no '_' "
            "at either end (it becomes part of tool names, mcp__NAME__TOOL)")


def _server_name(name: str) -> str:
    problem = server_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


ServerName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_server_name)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,100}$")]
HeaderName = Annotated[str, Field(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")]
ToolName = Annotated[str, Field(min_length=1, max_length=128)]
Word = Annotated[str, Field(max_length=32_768)]

# The project file Claude Code users keep their MCP servers in, at the workspace root.
MCP_JSON = ".mcp.json"
DEFAULT_STARTUP_TIMEOUT = 10.0
DEFAULT_TOOL_TIMEOUT = 60.0
MAX_SERVERS = 100

# The keys that say how to start or reach a server; the rest (enabled, timeouts, tool lists) tune it.
STDIO_KEYS = ("command", "args", "env", "cwd")
HTTP_KEYS = ("url", "bearer_token_env_var", "http_headers", "env_http_headers")
TRANSPORT_KEYS = STDIO_KEYS + HTTP_KEYS


def url_problem(url: str) -> str | None:
    """What is wrong with `url` as a streamable HTTP server's endpoint; None when nothing is."""
    if any(c.isspace() or not c.isprintable() for c in url):
        return f"url {url[:200]!r} holds spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port raises ValueError here
    except ValueError as exc:
        return f"url {url[:200]!r} is not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return f"url {url[:200]!r} is not an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000/mcp"
    return None


def shown_url(url: str) -> str:
    """`url` fit to show: without its user part (`user:password@`) or its query's values
    (`?key=...`), which may hold credentials."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return url.split("?", 1)[0].rsplit("@", 1)[-1][:200]
    if ":" in host:
        host = f"[{host}]"
    query = "&".join(f"{part.partition('=')[0]}=..." if "=" in part else "..." for part in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, host + port, parts.path, query, ""))


def shown_target(command: str | None, args: tuple[str, ...] | list[str], url: str | None) -> str:
    """A server's command line, or its URL (`shown_url`), fit to show."""
    if command:
        return shlex.join([command, *args])
    return shown_url(url or "")


def _http_url(url: str) -> str:
    problem = url_problem(url)
    if problem:
        raise ValueError(problem)
    return url


class McpServerConfig(BaseModel):
    """`[mcp_servers.NAME]`: a stdio server (`command`, `args`, `env`, `cwd`) or a streamable HTTP
    one (`url`, `bearer_token_env_var`, `http_headers`, `env_http_headers`), never both."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    command: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(None, description="the program of a stdio server")
    args: list[Word] = Field(default_factory=list, max_length=256, description="its arguments")
    env: dict[EnvName, Word] = Field(default_factory=dict, max_length=64, description="more environment variables for it")
    cwd: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(None, description="its working directory (beneath the workspace)")
    url: Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_http_url)] | None = Field(None, description="the endpoint of a streamable HTTP server")
    bearer_token_env_var: EnvName | None = Field(None, description="the variable holding the bearer token sent to it")
    http_headers: dict[HeaderName, Annotated[str, Field(max_length=8192)]] = Field(default_factory=dict, max_length=64, description="headers sent to it")
    env_http_headers: dict[HeaderName, EnvName] = Field(default_factory=dict, max_length=64, description="headers whose values come from variables")
    enabled: bool = True
    startup_timeout_sec: float = Field(DEFAULT_STARTUP_TIMEOUT, gt=0, le=600, description="seconds it may take to start and initialize")
    tool_timeout_sec: float = Field(DEFAULT_TOOL_TIMEOUT, gt=0, le=3600, description="seconds one tool call may take")
    enabled_tools: list[ToolName] | None = Field(None, max_length=1000, description="only these of its tools (none: all)")
    disabled_tools: list[ToolName] = Field(default_factory=list, max_length=1000, description="never these of its tools")

    # Layers merge key by key, so a table may be partial (`enabled = false` alone): the checks
    # below judge a whole server once merged (`problem`), not each table as a layer writes it.
    def problem(self) -> str | None:
        """What makes this server unusable, with the fix; None when it can run."""
        if self.command and self.url:
            return "it has both command (a stdio server) and url (an HTTP server): keep one"
        if not self.command and not self.url:
            return "it has neither command (a stdio server) nor url (a streamable HTTP server): give one"
        if self.command:
            stray = [k for k in HTTP_KEYS[1:] if getattr(self, k)]
            if stray:
                return f"{', '.join(stray)} {'is a key' if len(stray) == 1 else 'are keys'} of HTTP servers, and it is a stdio server (command): remove {'it' if len(stray) == 1 else 'them'}"
        else:
            stray = [k for k in STDIO_KEYS[1:] if getattr(self, k)]
            if stray:
                return f"{', '.join(stray)} {'is a key' if len(stray) == 1 else 'are keys'} of stdio servers, and it is an HTTP server (url): remove {'it' if len(stray) == 1 else 'them'}"
        return None


Origin = Literal["user", "project", "mcp.json"]


class McpServerSpec(BaseModel):
    """One server a session connects to, once the layers are merged and trust is judged.

    `origin` says where it was declared (`user`: $OSPREY_HOME/config.toml; `project`: a project's
    .osprey/config.toml; `mcp.json`: the project's .mcp.json). `trusted` servers' `readOnlyHint`
    makes a tool read-only; an untrusted one's tools are never read-only. `headers` holds the
    resolved headers (the bearer token and env headers read from the environment) and never
    appears in a repr."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: ServerName
    origin: Origin
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict, repr=False)
    startup_timeout_sec: float = DEFAULT_STARTUP_TIMEOUT
    tool_timeout_sec: float = DEFAULT_TOOL_TIMEOUT
    enabled_tools: tuple[str, ...] | None = None
    disabled_tools: tuple[str, ...] = ()
    trusted: bool = True
    # The command line or URL as its layer wrote it (before `${VAR}` expansion, a URL without its
    # user part or query values): what `osprey mcp list` shows; empty: shown from the fields above.
    shown: str = ""

    def target(self) -> str:
        """The command line or URL fit to show (never the values `${VAR}` expanded to)."""
        return self.shown or shown_target(self.command, self.args, self.url)

    def keeps(self, tool: str) -> bool:
        """Whether the tool `tool` of this server is offered (`enabled_tools`, `disabled_tools`)."""
        if self.enabled_tools is not None and tool not in self.enabled_tools:
            return False
        return tool not in self.disabled_tools


class McpSkipped(BaseModel):
    """A declared server that does not run, and why (shown by `osprey mcp list`, `/status`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str
    origin: Origin
    reason: str


class ResolvedMcp(BaseModel):
    """The servers of one run: those that run and those that do not."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    servers: tuple[McpServerSpec, ...] = ()
    skipped: tuple[McpSkipped, ...] = ()
