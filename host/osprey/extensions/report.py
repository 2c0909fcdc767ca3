"""What discovery found: one report entry per artifact, the schema of `osprey extensions --json`."""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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
