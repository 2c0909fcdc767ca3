"""The `extension_manage` tool as the catalogue sees it: its input and description. What it does
is in `manage.py`, loaded at its first call, so a session that never manages an extension does
not pay for importing it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..tools.base import Invocation, Tool, ToolContext, ToolInput, ToolOutcome

if TYPE_CHECKING:
    from ..config import Settings

TOOL_NAME = "extension_manage"
KINDS = ("skill", "system_prompt", "append_system", "tool", "hooks")
OPERATIONS = ("create", "replace", "delete", "list")
DIGEST = r"^(?:sha256:)?[0-9a-f]{64}$"


def _one_of(values: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    """The field's schema: a string from `values` (the tool itself answers other strings with
    unsupported_operation, so the input model takes any string)."""

    def edit(schema: dict[str, Any]) -> None:
        schema.pop("anyOf", None)
        schema.pop("default", None)
        schema.update(type="string", enum=list(values))

    return edit


class ManageInput(ToolInput):
    operation: str = Field(description="create, replace, delete or list.", json_schema_extra=_one_of(OPERATIONS))
    kind: str | None = Field(None, description=(
        "skill (skills/NAME/SKILL.md), system_prompt (SYSTEM.md, replaces the base prompt), append_system "
        "(APPEND_SYSTEM.md, appended to it), tool (tools/NAME.toml, a custom tool manifest) or hooks (hooks.toml). "
        "Required except for list, where it narrows the listing."), json_schema_extra=_one_of(KINDS))
    name: str | None = Field(None, description=(
        "For skill (lowercase letters, digits, single hyphens) and tool (lowercase letters, digits, underscores): "
        "the artifact's name, which its content must declare too. Leave it out for the other kinds."))
    content: str | None = Field(None, description="create and replace: the complete new content of the file (at most 256 KiB).")
    expected_digest: str | None = Field(None, pattern=DIGEST, description=(
        "replace and delete: the digest list (or the last write) reported for the artifact; the operation is refused "
        "with stale_revision when the file changed since."))


DESCRIPTION = (
    "Manage your person's own (user-layer, $OSPREY_HOME) extension artifacts: skills, the replacement system prompt "
    "(SYSTEM.md), the appended prompt (APPEND_SYSTEM.md), custom tool manifests and hooks.toml. Operations: list "
    "(metadata and digests, never bodies), create, replace and delete (pass expected_digest from list). Content is "
    "validated like Osprey loads it. Changes take effect at the next turn boundary. Tools and hooks written here stay "
    "inactive until the person reviews them and runs `osprey extensions trust NAME`; this tool never grants trust. "
    "Creating, replacing or deleting hooks.toml (the person's own hooks) always asks the person first, whatever the approval policy."
)


def manage_tool(settings: Settings, *, on_change: Callable[[], None], builtin_tools: Collection[str] = ()) -> Tool:
    """The `extension_manage` tool of a session. `on_change` runs after each successful create,
    replace or delete (the session reloads its extensions at the next turn boundary);
    `builtin_tools` are the session's built-in tool names, which a custom tool cannot take (the
    base tools, `process` and this tool are always among them)."""

    async def run(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        from .manage import manage

        request: ManageInput = call.input
        outcome, changed = await asyncio.to_thread(manage, settings, request, builtin=builtin_tools)
        if changed:
            on_change()
        return outcome

    return Tool.from_model(TOOL_NAME, DESCRIPTION, ManageInput, run, read_only=False, trusted=False)
