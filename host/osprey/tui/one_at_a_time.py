"""Requests put in front of the person one at a time (approval prompts, the model's questions)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Q = TypeVar("Q")
A = TypeVar("A")


class OneAtATime(Generic[Q, A]):
    """`show` puts one request in front of the person and returns the answer; concurrent asks wait
    their turn. `close` answers every pending ask, and every later one, with a fixed answer (on
    quit, so the calls waiting on them can finish)."""

    def __init__(self, show: Callable[[Q], Awaitable[A]]) -> None:
        self.show = show
        self._turn = asyncio.Lock()
        self._pending: list[asyncio.Future[A]] = []
        self._closed: tuple[A] | None = None

    @property
    def pending(self) -> int:
        return sum(not f.done() for f in self._pending)

    async def ask(self, request: Q) -> A:
        if self._closed is not None:
            return self._closed[0]
        answered: asyncio.Future[A] = asyncio.get_running_loop().create_future()
        self._pending.append(answered)
        try:
            async with self._turn:
                if answered.done():  # closed while waiting its turn
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

    def close(self, answer: A) -> int:
        """Answer every pending ask, and every later one, with `answer`; returns how many were pending."""
        self._closed = (answer,)
        count = 0
        for future in self._pending:
            if not future.done():
                future.set_result(answer)
                count += 1
        return count
