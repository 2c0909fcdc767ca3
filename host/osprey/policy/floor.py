"""The hardline floor as an interceptor: destructive shell commands are refused under every policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..interception import Interceptor, Order, PendingCall, Verdict


def shell_command(name: str, arguments: Mapping[str, Any]) -> str | None:
    """The shell command line a call would run (`bash`, and `process` starts), or None."""
    command = arguments.get("command")
    if not isinstance(command, str):
        return None
    if name == "bash" or (name == "process" and arguments.get("action") == "start"):
        return command
    return None


class HardlineFloor(Interceptor):
    """Always first, and again after any interceptor replaced a call's input."""

    name = "hardline"
    order = Order.FLOOR

    async def before_call(self, call: PendingCall) -> Verdict | None:
        command = shell_command(call.name, call.arguments)
        if command is None:
            return None
        from .hardline import check

        refusal = check(command)
        if refusal is None:
            return None
        return Verdict.deny(self.name, (
            f"refused by the hardline floor (rule {refusal.rule}): {refusal.reason} "
            "This floor applies under every approval policy, --yolo included. If the command is really needed, "
            "the user must run it outside Osprey; otherwise do the task another way."
        ), category="hardline")
