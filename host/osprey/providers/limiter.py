"""A requests-per-minute limit shared by every session of one spawn tree (a lead and its
children), and the provider wrapper that keeps to it."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

from ..messages import ModelRequest, ModelTurn
from .base import Provider, TextSink

WINDOW = 60.0


class RequestLimiter:
    """At most `per_minute` model requests in any sliding 60-second window, across every provider
    that shares this limiter. `acquire` waits for a slot; waiting is cancellable."""

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute < 1:
            raise ValueError("a requests-per-minute limit is at least 1")
        self.per_minute = per_minute
        self._clock = clock
        self._sent: collections.deque[float] = collections.deque()
        self._lock = asyncio.Lock()

    def wait_needed(self) -> float:
        """Seconds until the next request may go (0 when one may go now)."""
        now = self._clock()
        while self._sent and now - self._sent[0] >= WINDOW:
            self._sent.popleft()
        if len(self._sent) < self.per_minute:
            return 0.0
        return WINDOW - (now - self._sent[0])

    async def acquire(self) -> None:
        async with self._lock:  # requests go in the order they asked
            while (wait := self.wait_needed()) > 0:
                await asyncio.sleep(wait)
            self._sent.append(self._clock())


class LimitedProvider:
    """A provider whose every request first takes a slot of a shared `RequestLimiter`."""

    def __init__(self, inner: Provider, limiter: RequestLimiter) -> None:
        self.inner = inner
        self.limiter = limiter
        self.name = inner.name
        self.model = inner.model

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelTurn:
        await self.limiter.acquire()
        return await self.inner.complete(request, on_text)
