"""Tool definitions and the registry that validates arguments, runs tools and limits results."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import DispatcherError, OspreyError, ToolError, ToolTimeout
from ..messages import ToolSpec
from ..toolclient import ToolClient


class ToolInput(BaseModel):
    """Base for tool inputs: unknown arguments are refused, so typos surface."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class ToolOutcome:
    text: str
    is_error: bool = False
    category: str | None = None
    truncated_chars: int = 0


@dataclass
class ToolContext:
    client: ToolClient
    cwd: str
    roots: list[str]
    bash_max_output_bytes: int
    processes: Any = None  # ProcessManager in plain host runs; None in a lane
    on_output: Callable[[str, bytes], None] | None = None  # (call id, chunk) for live bash output
    call_id: str = ""
    # Called when the ToolService is unreachable: replaces a dead lane (updating `client`)
    # and says what happened, or returns None when there was nothing to recover.
    recover: Callable[[], Awaitable[str | None]] | None = None


@dataclass
class ToolDef:
    name: str
    description: str
    input_model: type[ToolInput]
    run: Callable[[Any, ToolContext], Awaitable["str | ToolOutcome"]]
    read_only: bool = False

    def spec(self) -> ToolSpec:
        schema = self.input_model.model_json_schema()
        return ToolSpec(name=self.name, description=self.description, parameters=_clean_schema(schema))


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema without pydantic's titles, which only cost tokens."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if isinstance(value, dict):
            value = {k: _clean_schema(v) if isinstance(v, dict) else v for k, v in value.items()} if key == "properties" else _clean_schema(value)
        out[key] = value
    out.setdefault("type", "object")
    if out.get("type") == "object":
        out.setdefault("properties", {})
    return out


async def _recovery_note(ctx: ToolContext) -> str:
    """What recovering the ToolService's home did, as lines to append to a failed call's result."""
    if ctx.recover is None:
        return ""
    try:
        note = await ctx.recover()
    except OspreyError as failure:
        note = f"starting a new ToolService failed too: {failure}"
    return f"\n{note}" if note else ""


def limit_text(text: str, max_chars: int) -> tuple[str, int]:
    """Keep the head and tail of `text` within `max_chars`; say how much was dropped."""
    if len(text) <= max_chars:
        return text, 0
    dropped = len(text) - max_chars
    head = max_chars * 2 // 3
    tail = max_chars - head
    marker = f"\n[... {dropped} characters dropped from this result; narrow the request to see them ...]\n"
    return text[:head] + marker + text[len(text) - tail :], dropped


@dataclass
class ToolRegistry:
    """The tools of one session, by name."""

    tools: dict[str, ToolDef] = field(default_factory=dict)
    max_result_chars: int = 50_000

    def add(self, tool: ToolDef) -> None:
        self.tools[tool.name] = tool

    def specs(self) -> list[ToolSpec]:
        return [t.spec() for t in self.tools.values()]

    def names(self) -> list[str]:
        return list(self.tools)

    async def call(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutcome(f"Error: there is no tool named {name!r}. Available tools: {', '.join(self.tools)}.", True, "unknown_tool")
        try:
            args = tool.input_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
            return ToolOutcome(f"Error: invalid arguments for {name}: {problems}.", True, "invalid_arguments")
        try:
            result = await tool.run(args, ctx)
        except ToolTimeout as exc:
            # The home may be stuck (a runaway call, a full process table): probe it, and
            # replace it when it no longer answers.
            return ToolOutcome(f"Error (timeout): {exc.message}" + await _recovery_note(ctx), True, "timeout")
        except ToolError as exc:
            return ToolOutcome(f"Error ({exc.category}): {exc.message}", True, exc.category)
        except DispatcherError as exc:
            return ToolOutcome(f"Error (tool_service_unavailable): {exc}" + await _recovery_note(ctx), True, "tool_service_unavailable")
        outcome = result if isinstance(result, ToolOutcome) else ToolOutcome(result)
        outcome.text, outcome.truncated_chars = limit_text(outcome.text, self.max_result_chars)
        return outcome
