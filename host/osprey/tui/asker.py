"""`TuiAsker`: the model's questions (`question` tool), answered by a person one at a time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .one_at_a_time import OneAtATime

Show = Callable[[str], Awaitable["str | None"]]


class TuiAsker(OneAtATime[str, "str | None"]):
    """The session's `ask`. `show` puts a question in front of the person and returns the answer,
    or None when they closed it; concurrent asks wait their turn."""

    def close_all(self) -> int:
        """Answer every pending ask, and every later one, with None; returns how many were pending."""
        return self.close(None)
