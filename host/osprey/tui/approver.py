"""`TuiApprover`: the session's approval asks, answered by a person one at a time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..policy.approvals import ApprovalAnswer, ApprovalRequest
from .one_at_a_time import OneAtATime

Show = Callable[[ApprovalRequest], Awaitable[ApprovalAnswer]]
CLOSING_REASON = "the user closed Osprey before answering this approval prompt"


class TuiApprover(OneAtATime[ApprovalRequest, ApprovalAnswer]):
    """Implements `Approver`. `show` puts a request in front of the person and returns the answer;
    concurrent asks wait their turn. `deny_all` answers every pending and later ask with a denial
    (on quit, so the calls waiting on them can finish)."""

    def deny_all(self, reason: str = CLOSING_REASON) -> int:
        """Deny every pending ask and every later one; returns how many were pending."""
        return self.close(ApprovalAnswer(decision="deny", reason=reason))
