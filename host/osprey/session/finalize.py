"""The finalization adjudicator: it judges every completion candidate against the verification
checkpoint, and may ask the model for another turn instead of letting the task end.

A candidate gets another turn when (in this order):

1. the checkpoint has open objections (a failed verification command not passed since, or a
   detector's objection): whatever the model says about its status;
2. it is not a `task_status(blocked)` declaration, and
   - the checkpoint is armed (`/verify`) and no verification command has passed since it was armed
     and since the last file change; or
   - files were changed since the last passing verification run, and a verification command
     failed earlier in the session (the model has shown it knows how to verify, and the last word
     on the code is a failure or stale).

So a plain answer, or a task that changed files in a project the model never verified, is not
nagged; work that has broken verification before must show it passes again. A `blocked`
declaration is only held back by open objections.

At most `max_continuations` forced continuations per task (a submitted prompt); after that the
candidate is accepted and a warning notice says what was still open.

Under `interactive` (the TUI's declared completion), a plain text answer is not a completion
candidate for the adjudicator: it lets it through, and the loop hands control back to the person.
A `task_status` call is: the loop asks the interceptors about it at the end of that call's batch,
with the call's turn number.

The adjudicator also feeds the checkpoint: its `after_call` passes every call that ran to
`Checkpoint.observe`, and it emits a `Verification` snapshot whenever the checkpoint changed by the
end of a batch or at a candidate, so the session's record always ends with its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..events import Event, Notice
from ..interception import CompletionCandidate, Continuation, Interceptor, Order, PendingCall, PromptSubmission, PromptVerdict
from .verification import Checkpoint

if TYPE_CHECKING:
    from ..tools.base import ToolOutcome

DEFAULT_MAX_CONTINUATIONS = 3
_SHOWN = 10  # paths and commands named in one reason


def _listed(items: list[str]) -> str:
    shown = items[-_SHOWN:]
    more = len(items) - len(shown)
    return ", ".join(shown) + (f" (and {more} more)" if more else "")


class Adjudicator(Interceptor):
    name = "finalization"
    order = Order.ADJUDICATOR

    def __init__(self, checkpoint: Checkpoint, *, emit: Callable[[Event], None], max_continuations: int = DEFAULT_MAX_CONTINUATIONS,
                 interactive: bool = False) -> None:
        if max_continuations < 0:
            raise ValueError("max_continuations is 0 or more")
        self.checkpoint = checkpoint
        self.emit = emit
        self.max_continuations = max_continuations
        self.interactive = interactive
        self.forced = 0  # continuations forced in the current task
        self._declared: tuple[int, str] | None = None  # (turn, status) of the last task_status call
        self._recorded = checkpoint.version

    # ---------------------------------------------------------------- the interception points

    async def prompt_submitted(self, prompt: PromptSubmission) -> PromptVerdict | None:
        self.forced = 0  # a new task
        self._declared = None
        return None

    async def after_call(self, call: PendingCall, outcome: ToolOutcome) -> ToolOutcome | None:
        self.checkpoint.observe(call.name, call.arguments, outcome)
        status = call.arguments.get("status")
        if call.name == "task_status" and not outcome.is_error and status in ("done", "blocked"):
            self._declared = (call.turn, str(status))
        return None

    def end_batch(self, turn: int) -> None:
        self.record(turn)

    async def completion_candidate(self, candidate: CompletionCandidate) -> Continuation | None:
        declared = self._declared[1] if self._declared is not None and self._declared[0] == candidate.turn else None
        if self.interactive and declared is None:
            return None  # a plain answer in the TUI: control goes back to the person
        reason = self.reason(declared)
        if reason is None:
            self._accept()
            self.record(candidate.turn)
            return None
        if self.forced >= self.max_continuations:
            self.emit(Notice(level="warning", message=(
                f"the task ended with verification still open ({reason.splitlines()[0]}): the finalization adjudicator "
                f"already asked for {self.forced} more turn{'s' if self.forced != 1 else ''}, its limit for one task"
            )))
            self._accept()
            self.record(candidate.turn)
            return None
        self.forced += 1
        self.record(candidate.turn)
        return Continuation(f"{reason}\n(Osprey's finalization check, continuation {self.forced} of {self.max_continuations}.)", self.name)

    # ---------------------------------------------------------------- the rule

    def reason(self, declared: str | None = None) -> str | None:
        """Why a candidate may not end the task now, or None (see the module docstring)."""
        cp = self.checkpoint
        objections = cp.objections
        if objections:
            lines = "\n".join(f"- {o}" for o in objections[-_SHOWN:])
            return (
                "The task is not finished: these verification objections are still open.\n" + lines + "\n"
                "Declaring the task done does not clear them. Fix the cause and run the same command again until it passes"
                " (the same command text clears its objection); if you truly cannot, say exactly why in your answer."
            )
        if declared == "blocked":
            return None
        if cp.armed and not cp.has_fresh_evidence():
            changed = cp.unverified_changes
            what = f" You changed {_listed(changed)}." if changed else ""
            return (
                "A verification audit was requested (/verify) and no verification command has passed since." + what +
                " Run the project's tests, build, linters or type checkers that cover the work, fix what fails, and then finish."
            )
        changed = cp.unverified_changes
        failed = cp.failed_commands()
        if changed and failed and not cp.has_fresh_evidence():
            return (
                f"You changed files ({_listed(changed)}) and ran no verification since. A verification command failed earlier "
                f"({_listed(failed)}): run it again and show it passes before you finish."
            )
        return None

    # ---------------------------------------------------------------- the record

    def record(self, turn: int) -> None:
        """Emit a `Verification` snapshot if the checkpoint changed since the last one."""
        if self.checkpoint.version != self._recorded:
            self._recorded = self.checkpoint.version
            self.emit(self.checkpoint.snapshot(turn))

    def _accept(self) -> None:
        self._declared = None
        self.checkpoint.disarm()  # the audit, if one was asked for, is over
