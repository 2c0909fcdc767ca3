"""The verification checkpoint fed by real write_file, edit_file and bash calls on a real local
ToolService (real pytest and make runs in the tmp workspace), its snapshot and restore."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness, calls, check_stream, text

from osprey.events import ToolResultEvent, Verification
from osprey.interception import Interceptor, PendingCall
from osprey.session.verification import Checkpoint, verification_command
from osprey.tools.base import ToolOutcome
from osprey.tools.control import control_tools

PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider test_calc.py"
PASSING = "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"
GOOD = "def add(a, b):\n    return a + b\n"
BAD = "def add(a, b):\n    return a - b\n"


class Observer(Interceptor):
    """Feeds every call that ran to the checkpoint, as the loop does."""

    name = "observer"

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint

    async def after_call(self, call: PendingCall, outcome: ToolOutcome) -> ToolOutcome | None:
        self.checkpoint.observe(call.name, call.arguments, outcome)
        return None


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"test_calc.py": PASSING})


async def drive(harness: Harness, script: list[Any], checkpoint: Checkpoint, *, control: bool = False) -> None:
    session, _ = await harness.start(script, interceptors=(Observer(checkpoint),), judgement=False)
    assert session.registry is not None
    if control:
        for tool in control_tools(emit=session.emit, ask=None, on_status=lambda s, t: None, turn=lambda: 0):
            session.registry.add(tool)
    try:
        await session.submit("Do the task.")
    finally:
        await session.close()
    check_stream(harness.events)


async def test_writes_are_claims_and_a_passing_run_is_evidence_that_a_later_write_makes_stale(harness: Harness) -> None:
    checkpoint = Checkpoint()
    await drive(harness, [
        calls(("write_file", {"path": "calc.py", "content": GOOD})),
        calls(("bash", {"command": PYTEST})),
        calls(("edit_file", {"path": "calc.py", "old_string": "a + b", "new_string": "b + a"})),
        calls(("edit_file", {"path": "calc.py", "old_string": "not there", "new_string": "x"})),  # fails: no claim
        text("done"),
    ], checkpoint)
    assert [r.ok for r in harness.of(ToolResultEvent)] == [True, True, True, False]
    assert checkpoint.claims == ["changed calc.py"]
    assert checkpoint.evidence == [f"PASSED: {' '.join(PYTEST.split())} [stale]"]
    assert checkpoint.objections == [] and not checkpoint.has_fresh_evidence()
    assert checkpoint.unverified_changes == ["calc.py"]
    assert not checkpoint.failed_before


async def test_a_failing_run_objects_until_the_same_command_passes(harness: Harness) -> None:
    checkpoint = Checkpoint()
    command = " ".join(PYTEST.split())
    await drive(harness, [
        calls(("write_file", {"path": "calc.py", "content": BAD})),
        calls(("bash", {"command": PYTEST})),
        calls(("bash", {"command": f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider --co test_calc.py"})),  # another command passes
        calls(("bash", {"command": 'sh -c "exit 1"'})),  # not a verification command
        text("done"),
    ], checkpoint)
    first_results = [r.ok for r in harness.of(ToolResultEvent)]
    assert first_results == [True, False, True, False]
    assert checkpoint.objections == [f"FAILED: {command} (exit 1)"]
    assert checkpoint.failed_before and checkpoint.failed_commands() == [command]
    checkpoint.claim("task_status done: all good")  # a claim clears nothing
    assert checkpoint.objections == [f"FAILED: {command} (exit 1)"]

    harness.events.clear()
    await drive(harness, [
        calls(("write_file", {"path": "calc.py", "content": GOOD})),
        calls(("bash", {"command": "  " + PYTEST + "  "})),  # the same command, spaced differently
        text("done"),
    ], checkpoint)
    assert checkpoint.objections == []
    assert f"PASSED: {command} (failed before)" in checkpoint.evidence
    assert checkpoint.has_fresh_evidence() and checkpoint.unverified_changes == []
    assert checkpoint.claims == ["changed calc.py", "claimed: task_status done: all good"]


async def test_make_failures_carry_their_exit_status_and_workdir(harness: Harness) -> None:
    (harness.workspace / "sub").mkdir()
    (harness.workspace / "sub" / "Makefile").write_text("check:\n\t@echo checking; exit 3\n")
    checkpoint = Checkpoint()
    await drive(harness, [calls(("bash", {"command": "make check", "workdir": "sub"})), text("done")], checkpoint)
    [result] = harness.of(ToolResultEvent)
    assert not result.ok and "[exit code 2]" in result.output
    assert checkpoint.objections == ["FAILED: make check [in sub] (exit 2)"]


async def test_a_task_status_call_is_a_claim_and_never_clears_an_objection(harness: Harness) -> None:
    checkpoint = Checkpoint()
    checkpoint.object("no_progress", "the same failure three times in ten calls")
    await drive(harness, [calls(("task_status", {"status": "done", "summary": "it works"})), text("done")], checkpoint, control=True)
    assert checkpoint.claims == ["claimed: task_status done: it works"]
    assert checkpoint.objections == ["no_progress: the same failure three times in ten calls"]


def test_detector_objections_are_raised_and_resolved_by_source() -> None:
    checkpoint = Checkpoint()
    checkpoint.object("no_progress", "pytest failed 3 times")
    checkpoint.object("no_progress", "make failed 3 times")
    checkpoint.object("no_progress", "make failed 3 times")  # the same objection again is one
    checkpoint.object("artifact_stasis", "nothing changed in 10 turns")
    assert checkpoint.objections == ["no_progress: pytest failed 3 times", "no_progress: make failed 3 times",
                                     "artifact_stasis: nothing changed in 10 turns"]
    assert checkpoint.resolve("no_progress") and not checkpoint.resolve("no_progress")
    assert checkpoint.objections == ["artifact_stasis: nothing changed in 10 turns"]
    again = Checkpoint.restore(checkpoint.snapshot().model_dump(mode="json"))
    assert again.resolve("artifact_stasis") and again.objections == []
    with pytest.raises(ValueError, match="objection source"):
        checkpoint.object("bad source: x", "text")


def outcome(text: str, ok: bool = True, category: str | None = None) -> ToolOutcome:
    return ToolOutcome(text, not ok, None if ok else (category or "exit_status"))


def test_snapshot_and_restore_round_trip_through_a_recorded_event() -> None:
    checkpoint = Checkpoint()
    checkpoint.observe("write_file", {"path": "./src/a.py"}, outcome("Created"))
    checkpoint.observe("bash", {"command": "pytest -q"}, outcome("1 failed\n[exit code 1]", ok=False))
    checkpoint.observe("bash", {"command": "pytest -q"}, outcome("1 passed\n[exit code 0]"))
    checkpoint.observe("bash", {"command": "ruff check ."}, outcome("[timed out after 120 s]", ok=False, category="timeout"))
    checkpoint.observe("bash", {"command": "mypy"}, outcome("ok\n[exit code 0]"))
    checkpoint.observe("edit_file", {"path": "src/b.py"}, outcome("Edited"))
    checkpoint.object("no_progress", "same failure: ruff")
    checkpoint.claim("done: it is fixed")
    checkpoint.arm()
    snap = checkpoint.snapshot(7)
    assert snap.turn == 7 and snap.armed
    assert snap.claims == ["changed src/a.py", "changed src/b.py", "claimed: done: it is fixed"]
    assert snap.evidence == ["PASSED: pytest -q (failed before) [stale]", "PASSED: mypy [stale]"]
    assert snap.objections == ["FAILED: ruff check . (timed out)", "no_progress: same failure: ruff"]
    recorded = snap.model_dump(mode="json")  # as the journal stores it
    again = Checkpoint.restore(recorded)
    assert again.snapshot(7).model_dump(exclude={"ts"}) == snap.model_dump(exclude={"ts"})
    assert again.failed_before and again.armed
    assert again.unverified_changes == ["src/a.py", "src/b.py"]
    assert again.resolve("no_progress")
    again.observe("bash", {"command": "ruff  check ."}, outcome("[exit code 0]"))
    assert again.objections == [] and "PASSED: ruff check . (failed before)" in again.evidence
    with pytest.raises(ValueError, match="not a verification event"):
        Checkpoint.restore({"type": "todo", "turn": 1, "items": []})


def test_arm_makes_evidence_stale_and_the_summary_note_carries_the_checkpoint() -> None:
    checkpoint = Checkpoint()
    assert checkpoint.summary_note() == ""
    checkpoint.observe("bash", {"command": "cargo test"}, outcome("[exit code 0]"))
    assert checkpoint.has_fresh_evidence()
    checkpoint.arm()
    assert not checkpoint.has_fresh_evidence() and checkpoint.armed
    checkpoint.observe("write_file", {"path": "src/lib.rs"}, outcome("Created"))
    checkpoint.observe("bash", {"command": "cargo clippy"}, outcome("warning\n[exit code 101]", ok=False))
    note = checkpoint.summary_note()
    assert note.splitlines() == [
        "[Verification checkpoint, kept by Osprey across compaction]",
        "A verification audit was requested (/verify): run the project's checks before finishing.",
        "Files changed: src/lib.rs",
        "Changed since the last passing verification run: src/lib.rs",
        "Evidence: PASSED: cargo test [stale]",
        "Open objection: FAILED: cargo clippy (exit 101)",
    ]
    checkpoint.disarm()
    assert not checkpoint.armed


def test_a_bash_call_that_never_ran_is_no_word_on_the_command() -> None:
    checkpoint = Checkpoint()
    checkpoint.observe("bash", {"command": "pytest"}, outcome("Error (tool_service_unavailable): gone", ok=False, category="tool_service_unavailable"))
    assert checkpoint.objections == [] and checkpoint.version == 0


def test_the_snapshot_is_the_event_type_a_session_records() -> None:
    assert isinstance(Checkpoint().snapshot(), Verification)


@pytest.mark.parametrize(("command", "verifies"), [
    ("pytest -q", True), ("python3 -m pytest tests", True), (".venv/bin/python -m pytest -x", True), ("py.test", True),
    ("npm test", True), ("npm run test:unit", True), ("npm run lint", True), ("npm run build", True), ("npm run dev", False),
    ("yarn test", True), ("pnpm test", True), ("pnpm run typecheck", True), ("bun test", True),
    ("cargo test", True), ("cargo build --release", True), ("cargo clippy", True), ("cargo run", False),
    ("go test ./...", True), ("go vet ./...", True), ("go build", True), ("go run .", False),
    ("make", True), ("make test", True), ("make check", True), ("make install", False),
    ("mvn test", True), ("./mvnw verify", True), ("gradle test", True), ("./gradlew check", True),
    ("tox -e py311", True), ("nox -s tests", True), ("ruff check .", True), ("ruff format .", False), ("ruff format --check .", True),
    ("python -m ruff check src", True), ("mypy src", True), ("tsc --noEmit", True), ("npx eslint .", True), ("npx jest", True),
    ("vitest run", True), ("./scripts/test", True), ("scripts/check.sh", True), ("bash scripts/test.sh", True), ("./run_tests.sh", True),
    ("cd pkg && pytest", True), ("FOO=1 uv run pytest", True), ("timeout -s KILL 60 pytest", True), ("pytest 2>&1", True),
    ("pytest > out.txt 2>&1", True), ("ls; pytest", True), ("dotnet test", True),
    ("pytest | tail -5", False), ("make test || true", False), ("pytest &", False), ("pytest; echo done", False),
    ("echo pytest", False), ('sh -c "exit 1"', False), ("python3 script.py", False), ("/usr/bin/test -f x", False),
    ("git status", False), ("echo 'unbalanced", False),
])
def test_which_commands_are_verification_commands(command: str, verifies: bool) -> None:
    assert verification_command(command) is verifies


async def test_arming_verification_is_recorded_at_once_and_refused_while_working(harness: Harness) -> None:
    from osprey.events import Verification

    session, gate, task = await harness.working()
    try:
        with pytest.raises(RuntimeError, match="still being worked on"):
            session.arm_verification()
        gate.set()
        await task
        session.arm_verification()
    finally:
        await session.close()
    armed = [e for e in harness.events if isinstance(e, Verification)]
    assert armed and armed[-1].armed


async def test_compaction_keeps_the_checkpoint_note_in_the_conversation_and_in_its_record(harness: Harness) -> None:
    from osprey.events import Compaction
    from osprey.sessions.resume import resume_point

    session, provider = await harness.start([text("first answer"), text("the summary")])
    try:
        await session.submit("start")
        assert session.checkpoint is not None
        session.checkpoint.object("test", "the build is red")
        note = session.checkpoint.summary_note()
        assert note
        await session.compact()
        [compaction] = harness.of(Compaction)
        assert compaction.summary == f"the summary\n\n{note}"
        # What a resumed session rebuilds from the record is what the model now sees.
        assert resume_point(harness.events).messages == session.messages
    finally:
        await session.close()


@pytest.mark.parametrize(("command", "verifies"), [
    ("(cd pkg && pytest)", True), ("{ pytest; }", True), ("cd x && (make test)", True), ("pytest # the suite", True),
    ("cat <<EOF\nnotes\nEOF\npytest", True), ("if true; then pytest; fi", False), ("x=$(pytest)", False),
    ("(pytest | tail)", False), ("pytest && echo ok || echo failed", False),
])
def test_the_line_is_read_with_the_shell_parser(command: str, verifies: bool) -> None:
    assert verification_command(command) is verifies
