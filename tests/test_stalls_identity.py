"""The stall detectors work out a failed call's identity (its tool and canonical arguments, hashed)
once, after it ran, from its arguments as they are then (an interceptor after the detectors may
have replaced them, or changed them in place)."""

from __future__ import annotations

from typing import Any

import pytest

from osprey.events import Event
from osprey.interception import PendingCall
from osprey.session import stalls
from osprey.session.stalls import StallDetectors, identical_failure_text
from osprey.tools.base import ToolOutcome

FAILED = ToolOutcome("Error (not_found): no such file", is_error=True, category="not_found")


def make() -> tuple[StallDetectors, list[Event]]:
    events: list[Event] = []
    return StallDetectors(events.append, lambda detector, text: None, lambda detector: None), events


def pending(call_id: str, arguments: dict[str, Any], name: str = "read_file") -> PendingCall:
    return PendingCall(id=call_id, name=name, arguments=arguments, tool=None, turn=1, cwd="/w", workspace="/w")


async def run(detectors: StallDetectors, call: PendingCall, change: Any = None) -> ToolOutcome | None:
    """One call through the detectors, failing; `change(call)` runs between before and after."""
    assert await detectors.before_call(call) is None
    if change is not None:
        change(call)
    return await detectors.after_call(call, FAILED)


async def test_arguments_are_hashed_once_per_call_when_they_do_not_change(monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[str] = []
    real = stalls.arguments_hash
    monkeypatch.setattr(stalls, "arguments_hash", lambda name, arguments: hashed.append(name) or real(name, arguments))
    detectors, _ = make()
    detectors.begin_batch(1)
    assert await run(detectors, pending("c1", {"path": "a.txt", "limit": 5})) is None
    repeated = await run(detectors, pending("c2", {"path": "a.txt", "limit": 5}))
    detectors.end_batch(1)
    assert hashed == ["read_file", "read_file"]
    assert repeated is not None and repeated.text.startswith(identical_failure_text("read_file", 2))


@pytest.mark.parametrize(("change", "changed"), [
    (lambda call: setattr(call, "arguments", {"path": "b.txt", "limit": 5}), {"path": "b.txt", "limit": 5}),
    (lambda call: call.arguments.__setitem__("path", "b.txt"), {"path": "b.txt", "limit": 5}),
    (lambda call: call.arguments.__setitem__("limit", 5.0), {"path": "a.txt", "limit": 5.0}),  # equal in Python, not in JSON
], ids=["replaced", "changed-in-place", "same-value-other-type"])
async def test_arguments_changed_after_the_detectors_are_identified_as_they_ran(change: Any, changed: dict[str, Any]) -> None:
    detectors, _ = make()
    detectors.begin_batch(1)
    assert await run(detectors, pending("c1", {"path": "a.txt", "limit": 5}), change) is None
    # A call that asks for the changed arguments from the start is the same call: its failure is the second.
    again = await run(detectors, pending("c2", changed))
    assert again is not None and again.text.startswith(identical_failure_text("read_file", 2))
    # The arguments as first given failed only once.
    first = await run(detectors, pending("c3", {"path": "a.txt", "limit": 5}))
    assert first is None
    detectors.end_batch(1)


async def test_nested_arguments_are_hashed_after_the_call_as_they_are_then() -> None:
    detectors, _ = make()
    detectors.begin_batch(1)
    arguments = {"edits": [{"old": "a", "new": "b"}]}
    assert await run(detectors, pending("c1", arguments, "multi_edit"), lambda call: call.arguments["edits"][0].update(new="c")) is None
    again = await run(detectors, pending("c2", {"edits": [{"old": "a", "new": "c"}]}, "multi_edit"))
    assert again is not None and again.text.startswith(identical_failure_text("multi_edit", 2))
    detectors.end_batch(1)
