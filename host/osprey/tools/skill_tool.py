"""The `load_skill` tool: a discovered skill's instructions, by the name the system prompt lists.
It takes a name only, never a path, so the model reads no SKILL.md that discovery did not accept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..skills import SkillError, SkillRegistry
from .base import Invocation, Tool, ToolContext, ToolOutcome

TOOL_NAME = "load_skill"
DESCRIPTION = (
    "Load a skill: its instructions, and the list of its other files (scripts, references) with the directory "
    "they are in. Give the name exactly as the skills section of the system prompt lists it. Load a skill when "
    "the task matches its description, before doing the task, then follow it."
)


def load_skill_tool(registry: SkillRegistry | Callable[[], SkillRegistry]) -> Tool:
    """The `load_skill` tool over `registry` (or over what a callable returns at each call, for a
    session whose skills are discovered again on /reload). Read-only."""

    async def run(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        current = registry if isinstance(registry, SkillRegistry) else registry()
        name = call.input.name
        try:
            if call.input.file:
                text = await asyncio.to_thread(current.read_other, name, call.input.file)
            else:
                text = await asyncio.to_thread(current.load, name)
        except SkillError as exc:
            return ToolOutcome(f"Error ({exc.category}, not retryable): {exc.message}", True, exc.category)
        return ToolOutcome(text)

    # It reads only the SKILL.md files discovery accepted: trusted like the other read-only built-ins.
    return Tool.stored(TOOL_NAME, DESCRIPTION, "osprey.tools.inputs.LoadSkillInput", run, read_only=True, trusted=True)
