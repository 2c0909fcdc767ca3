"""The doom-loop detector tells repeated calls apart by `call_key`: for a few short scalar
arguments a typed tuple (no JSON, no hash), equal exactly where the canonical JSON's hash is; a
successful call while no failure is counted is never hashed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from osprey.events import Advisory, Event
from osprey.interception import PendingCall
from osprey.session import stalls
from osprey.session.stalls import MAX_KEYED_CHARS, StallDetectors, arguments_hash, call_key
from osprey.tools.base import ToolOutcome

ARGUMENTS: list[dict[Any, Any]] = [
    {}, {"path": "a.txt"}, {"path": "b.txt"}, {"path": "a.txt", "limit": 5}, {"limit": 5, "path": "a.txt"},
    {"path": "a.txt", "limit": 5.0}, {"path": "a.txt", "limit": True}, {"path": "a.txt", "limit": "5"},
    {"path": "a.txt", "limit": None}, {"path": "a.txt", "limit": 1}, {"path": "a.txt", "limit": 1.0},
    {"x": 0.0}, {"x": -0.0}, {"x": float("nan")}, {"x": 0}, {"x": False}, {"x": [1]}, {"x": {"y": 1}},
    {"x": "\ud800"}, {"x": "é"}, {1: "a"}, {"1": "a"}, {"x": "y" * MAX_KEYED_CHARS}, {"x": "y" * (MAX_KEYED_CHARS + 1)},
    {f"k{i}": i for i in range(17)}, {f"k{i}": i for i in reversed(range(17))},
]


def test_keys_are_equal_exactly_where_the_hashes_are() -> None:
    for (i, a), (j, b) in itertools.product(enumerate(ARGUMENTS), repeat=2):
        for name_a, name_b in (("read_file", "read_file"), ("read_file", "grep")):
            same_hash = arguments_hash(name_a, a) == arguments_hash(name_b, b)
            assert (call_key(name_a, a) == call_key(name_b, b)) == same_hash, (i, j, name_a, name_b)


def pending(call_id: str, arguments: dict[str, Any]) -> PendingCall:
    return PendingCall(id=call_id, name="read_file", arguments=arguments, tool=None, turn=1, cwd="/w", workspace="/w")


async def test_a_successful_call_is_not_hashed_while_no_failure_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[str] = []
    real = stalls.arguments_hash
    monkeypatch.setattr(stalls, "arguments_hash", lambda name, arguments: hashed.append(name) or real(name, arguments))
    events: list[Event] = []
    detectors = StallDetectors(events.append, lambda detector, text: None, lambda detector: None)
    detectors.begin_batch(1)
    for i in range(2):
        call = pending(f"c{i}", {"path": f"{i}.txt"})
        assert await detectors.before_call(call) is None
        assert await detectors.after_call(call, ToolOutcome("text")) is None
    assert hashed == []
    # A failure is counted by its hash; the next success of the same call resets it (hashed again).
    call = pending("c2", {"path": "0.txt"})
    assert await detectors.before_call(call) is None
    await detectors.after_call(call, ToolOutcome("Error", is_error=True, category="not_found"))
    call = pending("c3", {"path": "0.txt"})
    assert await detectors.before_call(call) is None
    await detectors.after_call(call, ToolOutcome("text"))
    assert hashed == ["read_file", "read_file"]
    assert not detectors._failures
    detectors.end_batch(1)


@pytest.mark.parametrize(("third", "denied"), [({"path": "a.txt", "limit": 5}, True), ({"limit": 5, "path": "a.txt"}, True),
                                               ({"path": "a.txt", "limit": 5.0}, False), ({"path": "a.txt", "limit": True}, False)])
async def test_the_third_identical_call_in_a_row_is_denied(third: dict[str, Any], denied: bool) -> None:
    events: list[Event] = []
    detectors = StallDetectors(events.append, lambda detector, text: None, lambda detector: None)
    detectors.begin_batch(1)
    for i, arguments in enumerate([{"path": "a.txt", "limit": 5}, {"path": "a.txt", "limit": 5}, third]):
        verdict = await detectors.before_call(pending(f"c{i}", arguments))
        if i < 2:
            assert verdict is None
    assert (verdict is not None and verdict.category == "doom_loop") == denied
    assert [e.detector for e in events if isinstance(e, Advisory)] == (["doom_loop"] if denied else [])
    detectors.end_batch(1)
