"""`TuiAsker`: the model's questions (`question` tool), answered by a person one at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Show = Callable[[str], Awaitable["str | None"]]


class TuiAsker:
    """The session's `ask`. `show` puts a question in front of the person and returns the answer,
    or None when they closed it; concurrent asks wait their turn. `close_all` answers every
    pending and later ask with None (on quit, so the calls waiting on them can finish)."""

    def __init__(self, show: Show) -> None:
        self.show = show
        self._turn = asyncio.Lock()
        self._pending: list[asyncio.Future[str | None]] = []
        self._closed = False

    @property
    def pending(self) -> int:
        return sum(not f.done() for f in self._pending)

    async def ask(self, question: str) -> str | None:
        if self._closed:
            return None
        answered: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._pending.append(answered)
        try:
            async with self._turn:
                if answered.done():  # closed while waiting its turn
                    return answered.result()
                shown = asyncio.ensure_future(self.show(question))
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

    def close_all(self) -> int:
        """Answer every pending ask, and every later one, with None; returns how many were pending."""
        self._closed = True
        count = 0
        for future in self._pending:
            if not future.done():
                future.set_result(None)
                count += 1
        return count
