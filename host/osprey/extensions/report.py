"""What discovery found: one report entry per artifact, the schema of `osprey extensions --json`."""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..config.mcp import ResolvedMcp

Kind = Literal["tool", "hooks", "system_prompt", "append_system", "tool_descriptions", "toolsets", "config", "project_instructions", "workflow"]
Trust = Literal["trusted", "untrusted", "modified", "not_required"]
Status = Literal["active", "inactive", "shadowed", "skipped", "pending_reload"]
Provenance = Literal["agent", "legacy", "unknown", "none"]
Activation = Literal["session_start", "next_turn"]
SCHEMA_VERSION = 1
MAX_REASON = 300
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def sanitize(reason: str) -> str:
    """A reason fit for a report: no control characters (a file's own text may be in it), short."""
    text = _CONTROL.sub(" ", reason).strip()
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Artifact(BaseModel):
    """One artifact as discovery left it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    kind: Kind
    name: str = Field(description="a tool's name, or the file's name for the other kinds")
    layer: Literal["project", "user", "bundled", "environment"]
    path: str
    shadowed: list[str] = Field(default_factory=list, description="farther copies this one hides")
    trust: Trust = "not_required"
    status: Status = "active"
    provenance: Provenance = "none"
    digest: str | None = Field(None, description="sha256 of the file; for executable artifacts, the trust pin digest")
    activation: Activation = Field("session_start", description="when a change to it takes effect")
    reason: str | None = Field(None, description="why it is not active (sanitized)")
    runs: list[str] = Field(default_factory=list, description="for executable artifacts: what they run")


class McpServerEntry(BaseModel):
    """A declared MCP server: where it was declared, what it runs or where it is reached, and
    whether a session starts it (`osprey mcp list` starts them and lists their tools)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str
    origin: Literal["user", "project", "mcp.json"] = Field(description="$OSPREY_HOME/config.toml, the project's .osprey/config.toml, or its .mcp.json")
    status: Literal["runs", "skipped"]
    transport: Literal["stdio", "http"] | None = Field(None, description="None for a skipped one")
    runs: str | None = Field(None, description="a stdio server's command line, or an HTTP server's URL without credentials or query")
    trusted: bool | None = Field(None, description="whether its readOnlyHint is believed; None for a skipped one")
    reason: str | None = Field(None, description="why it is skipped (sanitized)")


def _shown_url(url: str) -> str:
    """The URL without what may be a secret: user information and the query."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{parts.port}" if parts.port is not None else "")
    except ValueError:
        return "(not a valid URL)"
    return urlunsplit((parts.scheme, netloc, parts.path, "…" if parts.query else "", ""))


def mcp_entries(resolved: ResolvedMcp) -> list[McpServerEntry]:
    """The report entries of the declared MCP servers: those that run, then those skipped."""
    import shlex

    entries = []
    for spec in resolved.servers:
        runs = shlex.join([spec.command or "", *spec.args]) if spec.transport == "stdio" else _shown_url(spec.url or "")
        entries.append(McpServerEntry(name=spec.name, origin=spec.origin, status="runs", transport=spec.transport,
                                      runs=sanitize(runs), trusted=spec.trusted))
    entries += [McpServerEntry(name=sanitize(item.name), origin=item.origin, status="skipped", reason=sanitize(item.reason))
                for item in resolved.skipped]
    return entries


class Report(BaseModel):
    """`osprey extensions --json`."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    schema_version: int = SCHEMA_VERSION
    workspace_root: str
    cwd: str
    home: str
    layers: list[dict[str, str]]
    artifacts: list[Artifact]
    warnings: list[str] = Field(default_factory=list)
    trust_agent_authored: bool = Field(False, description="[extensions] trust_agent_authored as configured; it governs no behavior yet")
    running_sessions: list[str] = Field(default_factory=list, description="the running sessions in this directory the statuses were compared with")
    mcp_servers: list[McpServerEntry] = Field(default_factory=list, description="the declared MCP servers (not started)")
