"""The finalization adjudicator driven through the session core on a real local ToolService: it
holds a completion back while verification objects, stops at its cap, leaves trivial answers alone,
and under the TUI's declared completion judges only task_status declarations."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from session_harness import FakeProvider, Harness, calls, check_stream, text

from osprey.events import Notice, TaskEnd, UserMessageEvent, Verification
from osprey.interception import CompletionCandidate
from osprey.session.finalize import Adjudicator
from osprey.session.verification import Checkpoint
from osprey.tools.base import ToolOutcome
from osprey.tools.control import control_tools

PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider test_calc.py"
COMMAND = " ".join(PYTEST.split())
PASSING = "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"
GOOD = "def add(a, b):\n    return a + b\n"
BAD = "def add(a, b):\n    return a - b\n"


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"test_calc.py": PASSING})


async def drive(harness: Harness, script: list[Any], adjudicator: Adjudicator, prompts: tuple[str, ...] = ("Do the task.",)) -> tuple[list[TaskEnd], FakeProvider]:
    session, provider = await harness.start(script, interceptors=(adjudicator,))
    assert session.registry is not None and session.loop is not None
    loop = session.loop
    for tool in control_tools(emit=session.emit, ask=None, on_status=lambda s, t: None, turn=lambda: loop.turns):
        session.registry.add(tool)
    ends = []
    try:
        for prompt in prompts:
            ends.append(await session.submit(prompt))
    finally:
        await session.close()
    check_stream(harness.events)
    return ends, provider


def told(harness: Harness) -> list[str]:
    """What the loop told the model (the adjudicator's reasons)."""
    return [e.text for e in harness.of(UserMessageEvent) if e.origin == "loop"]


def make(harness: Harness, **kw: Any) -> Adjudicator:
    return Adjudicator(Checkpoint(), emit=lambda e: harness.events.append(e), **kw)


async def test_an_open_objection_gets_another_turn_until_the_same_command_passes(harness: Harness) -> None:
    adjudicator = make(harness)
    [end], provider = await drive(harness, [
        calls(("write_file", {"path": "calc.py", "content": BAD})),
        calls(("bash", {"command": PYTEST})),
        calls(("task_status", {"status": "done", "summary": "implemented add"})),
        text("Done: add is implemented."),
        calls(("write_file", {"path": "calc.py", "content": GOOD})),
        calls(("bash", {"command": PYTEST})),
        text("Fixed; the test passes."),
    ], adjudicator)
    assert (end.outcome, end.exit_status, end.final_text) == ("Completed", 0, "Fixed; the test passes.")
    [reason] = told(harness)
    assert reason.splitlines()[:2] == ["The task is not finished: these verification objections are still open.", f"- FAILED: {COMMAND} (exit 1)"]
    assert "Declaring the task done does not clear them" in reason and "continuation 1 of 3" in reason
    assert provider.requests[4].messages[-1].content == reason  # type: ignore[union-attr]
    assert any(isinstance(e, Notice) and "finalization asked for another turn" in e.message for e in harness.events)
    last = harness.of(Verification)[-1]
    assert last.objections == [] and last.evidence == [f"PASSED: {COMMAND} (failed before)"]
    assert last.claims == ["changed calc.py", "claimed: task_status done: implemented add"]


async def test_the_cap_accepts_with_a_warning_and_resets_with_the_next_task(harness: Harness) -> None:
    adjudicator = make(harness, max_continuations=2)
    ends, provider = await drive(harness, [
        calls(("write_file", {"path": "calc.py", "content": BAD})),
        calls(("bash", {"command": PYTEST})),
        text("done"), text("really done"), text("done, I insist"),
        text("hello"), text("hello again"), text("still hello"),
    ], adjudicator, prompts=("Do the task.", "Say hello."))
    first, second = ends
    assert (first.outcome, first.final_text, first.turns) == ("Completed", "done, I insist", 5)
    assert (second.outcome, second.final_text, second.turns) == ("Completed", "still hello", 3)
    reasons = told(harness)
    assert [r.splitlines()[-1] for r in reasons] == ["(Osprey's finalization check, continuation 1 of 2.)", "(Osprey's finalization check, continuation 2 of 2.)"] * 2
    warnings = [e.message for e in harness.events if isinstance(e, Notice) and e.level == "warning"]
    assert len(warnings) == 2
    assert warnings[0].startswith("the task ended with verification still open (The task is not finished")
    assert "already asked for 2 more turns, its limit for one task" in warnings[0]


async def test_trivial_answers_and_unverified_projects_are_not_nagged(harness: Harness) -> None:
    adjudicator = make(harness)
    ends, _ = await drive(harness, [
        text("The answer is 4."),
        calls(("write_file", {"path": "notes.md", "content": "notes"})),
        text("Wrote the notes."),
    ], adjudicator, prompts=("What is 2+2?", "Write notes."))
    assert [e.final_text for e in ends] == ["The answer is 4.", "Wrote the notes."]
    assert told(harness) == []


async def test_changes_after_a_failure_was_fixed_need_verification_again(harness: Harness) -> None:
    adjudicator = make(harness)
    [end], _ = await drive(harness, [
        calls(("write_file", {"path": "calc.py", "content": BAD})),
        calls(("bash", {"command": PYTEST})),
        calls(("write_file", {"path": "calc.py", "content": GOOD})),
        calls(("bash", {"command": PYTEST})),
        calls(("write_file", {"path": "helpers.py", "content": "X = 1\n"})),
        text("done"),
        calls(("bash", {"command": PYTEST})),
        text("done, tests pass"),
    ], adjudicator)
    assert end.final_text == "done, tests pass"
    [reason] = told(harness)
    assert reason.startswith(f"You changed files (helpers.py) and ran no verification since. A verification command failed earlier ({COMMAND})")


async def test_an_armed_checkpoint_needs_a_fresh_passing_run_and_is_disarmed_after(harness: Harness) -> None:
    (harness.workspace / "calc.py").write_text(GOOD)
    adjudicator = make(harness)
    adjudicator.checkpoint.observe("bash", {"command": "pytest"}, ToolOutcome("[exit code 0]"))  # evidence from before /verify
    adjudicator.checkpoint.arm()
    [end], _ = await drive(harness, [
        text("All good."),
        calls(("bash", {"command": PYTEST})),
        text("Audited: the tests pass."),
    ], adjudicator)
    assert end.final_text == "Audited: the tests pass."
    [reason] = told(harness)
    assert reason.startswith("A verification audit was requested (/verify) and no verification command has passed since.")
    assert not adjudicator.checkpoint.armed
    assert harness.of(Verification)[-1].armed is False


async def test_interactive_plain_answers_go_back_to_the_person_and_declarations_are_judged(harness: Harness) -> None:
    adjudicator = make(harness, interactive=True)
    [end], _ = await drive(harness, [
        calls(("write_file", {"path": "calc.py", "content": BAD})),
        calls(("bash", {"command": PYTEST})),
        calls(("task_status", {"status": "done", "summary": "add works"})),
        text("Here is where things stand."),
    ], adjudicator)
    assert end.final_text == "Here is where things stand." and told(harness) == []  # a plain answer: not a candidate
    # The loop asks about a task_status call with that call's turn (turn 3 here).
    declared = await adjudicator.completion_candidate(CompletionCandidate(turn=3, text="add works", session_id=""))
    assert declared is not None and declared.source == "finalization"
    assert f"- FAILED: {COMMAND} (exit 1)" in declared.reason
    # Another turn's plain answer is still not one.
    assert await adjudicator.completion_candidate(CompletionCandidate(turn=4, text="hm", session_id="")) is None


async def test_blocked_is_held_back_only_by_objections(harness: Harness) -> None:
    adjudicator = make(harness, interactive=True)
    adjudicator.checkpoint.arm()  # an audit was asked for, and nothing was ever verified
    adjudicator.checkpoint.object("no_progress", "the same failure three times")
    [end], _ = await drive(harness, [
        calls(("task_status", {"status": "blocked", "summary": "need credentials"})),
        text("I am blocked: I need credentials."),
    ], adjudicator)
    assert end.outcome == "Completed" and told(harness) == []
    candidate = CompletionCandidate(turn=1, text="need credentials", session_id="")
    held = await adjudicator.completion_candidate(candidate)
    assert held is not None and "- no_progress: the same failure three times" in held.reason
    assert adjudicator.checkpoint.resolve("no_progress")
    assert await adjudicator.completion_candidate(candidate) is None  # armed and unverified, but blocked


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError):
        Adjudicator(Checkpoint(), emit=lambda e: None, max_continuations=-1)


async def test_a_stall_detectors_objection_holds_the_task_until_its_command_succeeds(harness: Harness) -> None:
    from osprey.session.stalls import StallDetectors

    adjudicator = make(harness)
    checkpoint = adjudicator.checkpoint
    stalls = StallDetectors(harness.events.append, checkpoint.object, checkpoint.resolve)
    failing = ("bash", {"command": "ls missing-dir"})
    session, provider = await harness.start([
        calls(failing), calls(("read_file", {"path": "test_calc.py"})), calls(failing), calls(("read_file", {"path": "test_calc.py"})),
        calls(failing),
        text("done"),
        calls(("bash", {"command": "mkdir missing-dir && ls missing-dir"})), calls(("bash", {"command": "ls missing-dir"})),
        text("done now"),
    ], interceptors=(stalls, adjudicator))
    try:
        end = await session.submit("List missing-dir.")
    finally:
        await session.close()
    check_stream(harness.events)
    assert end.final_text == "done now"
    [reason] = told(harness)
    assert "- no_progress: 3 of the last 3 process runs failed the same way" in reason
    assert checkpoint.objections == []
