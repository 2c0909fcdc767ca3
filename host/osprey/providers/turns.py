"""One logical model turn: a request and its retries within one deadline (the session's turns, and
each model of a mixture of agents)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..config import RetrySettings
from ..errors import ProviderError
from ..messages import ModelRequest, ModelTurn
from .base import Provider, TextSink


class TurnTimeout(Exception):
    """A logical model turn passed its deadline (across all its retries)."""


async def run_turn(provider: Provider, request: ModelRequest, retry: RetrySettings, on_text: TextSink | None = None, notify: Callable[[str], None] | None = None) -> ModelTurn:
    """One logical turn: a deadline across the first request and its retries."""
    deadline = time.monotonic() + retry.turn_timeout
    attempt = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TurnTimeout(f"the model did not answer within {retry.turn_timeout:g} s")
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns a result that is ready when a
            # cancellation arrives, and the cancellation is lost.
            async with asyncio.timeout(remaining):
                return await provider.complete(request, on_text)
        except TimeoutError:
            raise TurnTimeout(f"the model did not answer within {retry.turn_timeout:g} s") from None
        except ProviderError as exc:
            if not exc.retryable or attempt >= retry.max_retries:
                raise
            delay = retry.delays[min(attempt, len(retry.delays) - 1)] if retry.delays else 0.0
            if exc.retry_after is not None:
                delay = exc.retry_after  # the server said when: sooner or later than the schedule
            attempt += 1
            if deadline - time.monotonic() <= delay:
                if exc.retry_after is not None:
                    raise ProviderError(f"{exc} (it asked to wait {exc.retry_after:g} s, past this turn's "
                                        f"{retry.turn_timeout:g} s deadline)", status=exc.status) from None
                raise TurnTimeout(f"the model did not answer within {retry.turn_timeout:g} s (last error: {exc})") from None
            if notify:
                wait = f"{delay:g} s, as the server asked" if exc.retry_after is not None else f"{delay:g} s"
                notify(f"retrying the model request in {wait} (retry {attempt} of {retry.max_retries}): {exc}")
            await asyncio.sleep(delay)
