"""Approval policies: whether a tool call may run before it reaches the ToolService.

Headless runs have no interactive approval channel, so a call that would need a
prompt is denied with a deterministic message instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from .tools.builtin import TRUSTED_READ_ONLY

PRESETS = {"yolo": "never", "read-only-headless": "deny-untrusted", "read-only-tui": "unless-trusted"}


@dataclass
class Decision:
    allowed: bool
    reason: str = ""


class ApprovalGate:
    """Applies one policy across a session (the on-failure policy keeps a latch).

    The on-failure latch is read per batch: call `begin_batch()` before deciding the calls of one
    model turn, so a failure inside a batch affects the next batch, not the rest of this one.
    """

    def __init__(self, policy: str, *, interactive: bool = False) -> None:
        self.policy = policy
        self.interactive = interactive
        self.failure_latched = False
        self._batch_latched = False

    def begin_batch(self) -> None:
        """Start deciding the tool calls of one model turn."""
        self._batch_latched = self.failure_latched

    def _needs_prompt(self, tool: str) -> bool:
        if self.policy == "never":
            return False
        if self.policy in ("unless-trusted", "deny-untrusted"):
            return tool not in TRUSTED_READ_ONLY
        if self.policy == "on-failure":
            return self._batch_latched
        return True  # on-request

    def decide(self, tool: str) -> Decision:
        if not self._needs_prompt(tool):
            return Decision(True)
        if self.policy == "deny-untrusted":
            return Decision(False, f"denied by the approval policy deny-untrusted: only the trusted read-only tools ({', '.join(TRUSTED_READ_ONLY)}) run without approval. Work with those tools, or the user can rerun with --yolo.")
        return Decision(False, f"{tool} needs approval under the policy {self.policy}, and this headless run has no way to ask. The user can rerun with --yolo.")

    def record(self, ok: bool) -> None:
        """Feed a tool result back (on-failure: a failure arms the latch for the next batch; a
        success in a batch that ran under the latch, so was approved, clears it)."""
        if self.policy == "on-failure":
            if not ok:
                self.failure_latched = True
            elif self._batch_latched:
                self.failure_latched = False
