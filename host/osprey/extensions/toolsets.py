"""Named toolsets (`toolsets.toml`, the nearest file wins) and the tool names a toolset selects.

```toml
[toolsets.readonly]
tools = ["read_file", "grep", "find_files", "list_directory", "tree"]

[toolsets.review]
includes = ["readonly"]
tools = ["word_count"]
exclude = ["tree"]
```

A set is the union of its tools and its included sets (recursively); its excludes are removed
after each union. An include cycle stops at the first set seen again.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from .. import tomlfile
from ..errors import ConfigError
from .layers import MAX_TOOLSETS_BYTES as MAX_TOOLSETS_BYTES

Name = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
# A tool: its name, or all of an MCP server's tools (`mcp__SERVER`, `mcp__SERVER__*`).
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=72, pattern=r"^(?:[A-Za-z0-9_.-]+|mcp__[A-Za-z0-9_-]+__\*)$")]


class Toolset(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    tools: list[ToolName] = Field(default_factory=list, max_length=500)
    includes: list[Name] = Field(default_factory=list, max_length=100)
    exclude: list[ToolName] = Field(default_factory=list, max_length=500)


class ToolsetsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    toolsets: dict[Name, Toolset] = Field(default_factory=dict, max_length=200)


class ToolsetError(ConfigError):
    """A toolset that cannot be selected; the message says why and what exists."""


def parse_toolsets(data: bytes) -> ToolsetsFile:
    """A toolsets.toml's content, or a ToolsetError saying what is wrong with it."""
    import tomli  # here: most sessions have no such file

    try:
        raw = tomlfile.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ToolsetError("not UTF-8 text") from None
    except tomli.TOMLDecodeError as exc:
        raise ToolsetError(f"not valid TOML: {exc}") from None
    try:
        return ToolsetsFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ToolsetError(f"{where}: {first['msg']}") from None


def select(file: ToolsetsFile | None, requested: str, *, problem: str | None = None) -> set[str]:
    """The tool names of toolset `requested`. `file` is the nearest toolsets.toml (None when there
    is none; `problem` says why one was skipped)."""
    if file is None:
        if problem:
            raise ToolsetError(f"--toolset {requested}: the nearest toolsets.toml was skipped ({problem}), so no toolset can be selected")
        raise ToolsetError(f"--toolset {requested}: there is no toolsets.toml in the project's .osprey directories or in $OSPREY_HOME")
    if requested not in file.toolsets:
        names = ", ".join(sorted(file.toolsets)) or "(none)"
        raise ToolsetError(f"unknown toolset {requested!r}; the toolsets defined are: {names}")
    seen: set[str] = set()

    def resolve(name: str, container: str | None) -> set[str]:
        if name not in file.toolsets:
            raise ToolsetError(f"the toolset {container!r} includes {name!r}, which is not defined")
        if name in seen:
            return set()  # a cycle: stop at the first set seen again
        seen.add(name)
        spec = file.toolsets[name]
        tools = set(spec.tools) - set(spec.exclude)
        for included in spec.includes:
            tools |= resolve(included, name)
            tools -= set(spec.exclude)
        return tools

    return resolve(requested, None)
