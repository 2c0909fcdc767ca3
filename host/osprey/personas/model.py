"""What a persona is once resolved, and the error a persona file that cannot be used raises."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from ..errors import ConfigError

Source = Literal["project", "user", "bundled"]


class PersonaError(ConfigError):
    """A persona cannot be resolved: the message names the file (or the name) and what to fix."""


# A pydantic dataclass rather than a BaseModel: the field `schema` would shadow BaseModel.schema.
@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Persona:
    """A resolved persona: its prompt, tool allowlist, output contract and where it came from.

    `prompt` is the Markdown body after the frontmatter. `tools` is None when the file declares no
    allowlist. `schema` is the loaded JSON Schema of the output contract and `schema_path` the file
    it was read from (the bundled copy when a missing bundled schema name fell back to it)."""

    name: str
    prompt: str
    source: Source
    path: str
    description: str = ""
    terminal_tool: str | None = None
    schema: dict[str, Any] | None = None
    schema_path: str | None = None
    spawnable: bool = False
    tools: tuple[str, ...] | None = None
    toolset: str | None = None
    dev_tooling: bool = False

    @property
    def terminal(self) -> bool:
        """Whether the persona has an output contract (a terminal tool or a schema), which can only
        be chosen at launch, never switched to."""
        return self.terminal_tool is not None or self.schema is not None
