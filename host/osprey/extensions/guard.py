"""The user's own hooks file is the person's: `extension_manage` changes or deletes it only after
the person approved that very call, under every approval policy, `--yolo` included.

`UserHooksGuard` stands just before the approval policy, after the hooks: a hook cannot allow the
call past it (`HooksInterceptor` turns a hook's allow or ask of such a call into no decision),
and the policy never gets to skip the question. A hook's deny still wins. The question says what
the call does to the person's hooks; a headless run has nobody to ask, so the call is denied.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..interception import Interceptor, Order, PendingCall, Verdict
from .manage_tool import TOOL_NAME

_CHANGES = ("create", "replace", "delete")


def changes_user_hooks(name: str, arguments: Mapping[str, Any]) -> bool:
    """Whether a call would write or delete the user's hooks file."""
    return name == TOOL_NAME and arguments.get("kind") == "hooks" and arguments.get("operation") in _CHANGES


def question(operation: str, home: Path) -> str:
    """The approval text of a call that changes the user's own hooks."""
    path = home / "hooks.toml"
    what = {"create": "create", "replace": "REPLACE", "delete": "DELETE"}.get(operation, "change")
    return (f"the agent asks to {what} YOUR OWN hooks file {path}, the hooks that guard every session of yours. "
            + ("Deleting it stops those hooks at the next turn. " if operation == "delete" else
               "A hooks file the agent wrote stays inactive until you trust it (`osprey extensions trust hooks`), so your current hooks "
               "stop running at the next turn. ")
            + "Allow it only if you asked for this change to your own hooks.")


class UserHooksGuard(Interceptor):
    """Asks the person before `extension_manage` creates, replaces or deletes `$OSPREY_HOME/hooks.toml`."""

    name = "user-hooks"
    order = Order.APPROVALS - 1
    model_only = True  # a call the person ran themselves needs no question

    def __init__(self, home: Path) -> None:
        self.home = home

    async def before_call(self, call: PendingCall) -> Verdict | None:
        if not changes_user_hooks(call.name, call.arguments):
            return None
        return Verdict.ask(self.name, question(str(call.arguments.get("operation")), self.home))
