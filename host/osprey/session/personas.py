"""A session's persona: the system prompt section it adds, the terminal tool of a launch-time
output contract (`submit_plan`), and `switch_persona`, the model's way to change roles.

A persona comes resolved (`osprey.personas`). Its `tools` are an allowlist of the catalogue and its
`toolset` a named set (a `--toolset` given at launch overrides it); both are applied when the
session starts. A switch changes the system prompt from the next turn; it never adds or removes a
terminal tool, so personas with an output contract are chosen at launch only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..tools.base import Invocation, Tool, ToolContext, ToolInput, ToolOutcome

if TYPE_CHECKING:
    from ..personas import Persona


# The terminal tool of a persona that declares an output schema but names no tool.
DEFAULT_TERMINAL_TOOL = "submit_result"


def contract_of(persona: Persona) -> tuple[str, dict[str, Any]] | None:
    """A persona's output contract as (terminal tool, JSON Schema of its arguments), or None: a
    tool without a schema takes any object; a schema without a tool is `submit_result`'s."""
    if not persona.terminal:
        return None
    return persona.terminal_tool or DEFAULT_TERMINAL_TOOL, persona.schema or {"type": "object"}


def persona_section(persona: Persona, dev_tooling: str = "") -> str:
    """The system prompt's persona section: its instructions, then what `dev_tooling` found."""
    text = f"# Persona: {persona.name}\n\n{persona.prompt.strip()}"
    contract = contract_of(persona)
    if contract is not None:
        text += (f"\n\nThis task ends only with a call of {contract[0]} whose arguments validate against its "
                 "schema; its arguments are the task's result.")
    if dev_tooling:
        text += f"\n\n{dev_tooling.strip()}"
    return text


def terminal_tool(name: str, schema: dict[str, Any], submit: Callable[[object], None]) -> Tool:
    """The terminal tool: its parameters are the contract's JSON Schema, so a call that does not
    validate comes back to the model as an error naming the problems; a valid one is submitted (a
    completion candidate the adjudicator judges once the turn's calls have run)."""

    async def run(call: Invocation, ctx: ToolContext) -> str:
        submit(dict(call.arguments))
        return f"{name}: the result is valid and submitted; the task ends once it is accepted."

    described = schema.get("description")
    description = ("Submit this task's result as one JSON object that validates against the schema of these parameters"
                   + (f" ({described})" if isinstance(described, str) and described else "")
                   + f". Call {name} once, at the end: the task ends with it.")
    # A schema's own identifiers are not parameters: providers take only the schema itself.
    parameters = {key: value for key, value in schema.items() if key not in ("$schema", "$id", "title", "description")}
    return Tool(name, description, parameters, run, read_only=True, trusted=True)


class SwitchPersonaInput(ToolInput):
    name: str = Field(min_length=1, max_length=80, description="The persona to switch to (default, coding, or a project or user persona).")


def switch_persona_tool(switch: Callable[[str], str]) -> Tool:
    """`switch_persona`: `switch(name)` makes the change (or raises ValueError saying why not) and
    returns what to tell the model."""

    async def run(call: Invocation, ctx: ToolContext) -> str | ToolOutcome:
        try:
            return switch(call.input.name)
        except ValueError as exc:
            return ToolOutcome(f"switch_persona: {exc} The current persona stays active.", is_error=True, category="invalid_argument")

    return Tool.from_model(
        "switch_persona",
        "Change the persona (the role and its instructions) from the next turn on: default, coding, or a project or user "
        "persona. Personas with an output contract (architect, verifier) cannot be switched to; they are chosen at launch.",
        SwitchPersonaInput, run, read_only=True, trusted=True,
    )
