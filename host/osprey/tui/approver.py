"""`TuiApprover`: the session's approval asks, answered by a person one at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ..policy.approvals import ApprovalAnswer, ApprovalRequest

Show = Callable[[ApprovalRequest], Awaitable[ApprovalAnswer]]
CLOSING_REASON = "the user closed Osprey before answering this approval prompt"


class TuiApprover:
    """Implements `Approver`. `show` puts a request in front of the person and returns the answer;
    concurrent asks wait their turn. `deny_all` answers every pending and later ask with a denial
    (on quit, so the calls waiting on them can finish)."""

    def __init__(self, show: Show) -> None:
        self.show = show
        self._turn = asyncio.Lock()
        self._pending: list[asyncio.Future[ApprovalAnswer]] = []
        self._closed_reason: str | None = None

    @property
    def pending(self) -> int:
        return sum(not f.done() for f in self._pending)

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self._closed_reason is not None:
            return ApprovalAnswer(decision="deny", reason=self._closed_reason)
        answered: asyncio.Future[ApprovalAnswer] = asyncio.get_running_loop().create_future()
        self._pending.append(answered)
        try:
            async with self._turn:
                if answered.done():  # denied while waiting its turn
                    return answered.result()
                shown = asyncio.ensure_future(self.show(request))
                try:
                    await asyncio.wait({shown, answered}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not shown.done():
                        shown.cancel()
                if answered.done():
                    return answered.result()
                return shown.result()
        finally:
            self._pending.remove(answered)

    def deny_all(self, reason: str = CLOSING_REASON) -> int:
        """Deny every pending ask and every later one; returns how many were pending."""
        self._closed_reason = reason
        count = 0
        for future in self._pending:
            if not future.done():
                future.set_result(ApprovalAnswer(decision="deny", reason=reason))
                count += 1
        return count
