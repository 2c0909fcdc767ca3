"""The stall detectors, end to end through the session core: a scripted model repeats itself, the
real tools run on a real local ToolService, and the tests check which calls ran, the advisory
events, what the model was told (the provider's recorded requests) and the objections raised and
withdrawn. Then the failure-family classifier and the artifact heuristic on their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness, calls, check_stream, text

from osprey.events import Advisory, ToolResultEvent
from osprey.messages import ToolResultMessage
from osprey.session.stalls import (
    Family,
    StallDetectors,
    StallSettings,
    artifact_stasis_objection,
    artifact_stasis_text,
    changes_artifacts,
    doom_loop_text,
    error_line,
    failure_family,
    identical_failure_text,
    no_progress_objection,
    no_progress_text,
    normalise,
    program_key,
)
from osprey.tools.base import ToolOutcome


class Objections:
    """The verification side of the detectors: what was raised and withdrawn, in order, with the
    number of tool results the session had reported at that moment."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.log: list[tuple[str, str, str, int]] = []

    def _results(self) -> int:
        return len(self.harness.of(ToolResultEvent))

    def object(self, detector: str, text: str) -> None:
        self.log.append(("object", detector, text, self._results()))

    def resolve(self, detector: str) -> None:
        self.log.append(("resolve", detector, "", self._results()))


@pytest.fixture
def h(workspace: Path, tmp_path: Path) -> Harness:
    (workspace / "a.txt").write_text("alpha\n")
    return Harness(workspace, tmp_path / "osprey-home")


def detectors(h: Harness, settings: StallSettings | None = None) -> tuple[StallDetectors, Objections]:
    seen = Objections(h)
    # The advisories go into the session's own event stream, as the session core would pass it.
    return StallDetectors(emit=h.events.append, object=seen.object, resolve=seen.resolve, settings=settings), seen


def advisories(h: Harness) -> list[tuple[int, str, str, str | None]]:
    return [(a.turn, a.detector, a.message, a.call_id) for a in h.of(Advisory)]


def sent_result(request: Any, call_id: str) -> ToolResultMessage:
    """The result of `call_id` as the model received it in `request`."""
    [message] = [m for m in request.messages if isinstance(m, ToolResultMessage) and m.tool_call_id == call_id]
    return message


def ids(turn: Any) -> list[str]:
    return [c.id for c in turn.message.tool_calls]


# ------------------------------------------------------------------ doom loop


async def test_the_same_call_forever_is_not_dispatched_from_the_third_time_and_the_model_is_told(h: Harness) -> None:
    same = ("bash", {"command": "echo run >> log.txt"})
    turns = [calls(same) for _ in range(5)]
    stall, seen = detectors(h)
    end, provider = await h.run([*turns, text("I will stop.")], interceptors=(stall,))
    check_stream(h.events)
    assert end.outcome == "Completed"
    assert (h.workspace / "log.txt").read_text() == "run\nrun\n"  # only the first two ran
    call_ids = [ids(t)[0] for t in turns]
    results = [h.result(i) for i in call_ids]
    assert [r.ok for r in results] == [True, True, False, False, False]
    assert [r.error_category for r in results[2:]] == ["doom_loop"] * 3
    for n, result in zip((3, 4, 5), results[2:], strict=True):
        assert result.output == f"Error (doom_loop): {doom_loop_text('bash', n)}"
    # One advisory for the loop (the later denials are equivalent and suppressed), at the third call.
    assert advisories(h) == [(3, "doom_loop", doom_loop_text("bash", 3), call_ids[2])]
    told = sent_result(provider.requests[3], call_ids[2])
    assert told.is_error and told.content == f"Error (doom_loop): {doom_loop_text('bash', 3)}"
    assert "Change your approach" in told.content
    assert seen.log == []  # the doom loop corrects; it raises no objection


async def test_polling_a_child_agent_with_the_same_call_is_not_a_doom_loop(h: Harness) -> None:
    from osprey.interception import PendingCall

    stall, _ = detectors(h)
    poll = {"ids": ["agent-1"], "timeout": 30}
    verdicts = [await stall.before_call(PendingCall(f"c{n}", "wait_agent", poll, None, n, str(h.workspace), str(h.workspace)))
                for n in range(1, 6)]
    assert verdicts == [None] * 5
    # A polling call also breaks a streak of another call: the repeats count again from there.
    same = {"command": "ls"}
    results = [await stall.before_call(PendingCall(f"b{n}", "bash", same, None, 6 + n, str(h.workspace), str(h.workspace)))
               for n in range(3)]
    assert results[:2] == [None, None] and results[2] is not None and results[2].category == "doom_loop"


async def test_three_identical_reads_in_one_turn_run_twice(h: Harness) -> None:
    read = ("read_file", {"path": "a.txt"})
    turn = calls(read, read, read)
    stall, _ = detectors(h)
    end, provider = await h.run([turn, text("done")], interceptors=(stall,))
    first, second, third = (h.result(i) for i in ids(turn))
    assert first.ok and second.ok and "alpha" in first.output
    assert (third.ok, third.error_category) == (False, "doom_loop")
    assert advisories(h) == [(1, "doom_loop", doom_loop_text("read_file", 3), ids(turn)[2])]
    assert sent_result(provider.requests[1], ids(turn)[2]).content == f"Error (doom_loop): {doom_loop_text('read_file', 3)}"


async def test_a_different_call_between_breaks_the_streak(h: Harness) -> None:
    same = ("read_file", {"path": "a.txt"})
    turns = [calls(same), calls(same), calls(("list_directory", {"path": "."})), calls(same), calls(same)]
    stall, _ = detectors(h)
    await h.run([*turns, text("done")], interceptors=(stall,))
    assert all(r.ok for r in h.of(ToolResultEvent))
    assert advisories(h) == []


# ------------------------------------------------------------------ identical failure


async def test_the_same_failing_call_gets_the_notice_at_its_second_failure_across_other_calls_and_a_success_resets_it(h: Harness) -> None:
    missing = ("read_file", {"path": "missing.txt"})
    t1 = calls(missing)
    t2 = calls(("write_file", {"path": "missing.txt", "content": "now here\n"}), missing)
    t3 = calls(("bash", {"command": "rm missing.txt"}), ("list_directory", {"path": "."}))
    t4 = calls(missing)
    t5 = calls(("grep", {"pattern": "alpha"}), missing)
    t6 = calls(missing)
    stall, seen = detectors(h)
    end, provider = await h.run([t1, t2, t3, t4, t5, t6, text("giving up on missing.txt")], interceptors=(stall,))
    check_stream(h.events)
    assert end.outcome == "Completed"
    first, success, after_reset, second, third = h.result(ids(t1)[0]), h.result(ids(t2)[1]), h.result(ids(t4)[0]), h.result(ids(t5)[1]), h.result(ids(t6)[0])
    assert success.ok and "now here" in success.output
    assert not first.ok and not after_reset.ok and not second.ok and not third.ok
    plain_error = first.output
    assert plain_error.startswith("Error") and "[retry suppressor]" not in plain_error
    # Without the reset, the failure after the success would have been the second one.
    assert after_reset.output == plain_error
    # The second failure since the success: the notice is in front of the tool's own error.
    notice = identical_failure_text("read_file", 2)
    assert second.output == f"{notice}\n\n{plain_error}"
    assert second.error_category == first.error_category
    # The third is an equivalent advisory within 30 turns: not given again.
    assert third.output == plain_error
    assert advisories(h) == [(5, "identical_failure", notice, ids(t5)[1])]
    told = sent_result(provider.requests[5], ids(t5)[1])
    assert told.is_error and told.content == f"{notice}\n\n{plain_error}"
    assert sent_result(provider.requests[4], ids(t4)[0]).content == plain_error
    assert seen.log == []


async def test_an_equivalent_advisory_is_suppressed_for_30_turns(h: Harness) -> None:
    missing = ("read_file", {"path": "missing.txt"})
    # Each turn also writes a file, so the workspace changes and the calls never repeat back to back.
    turns = [calls(missing, ("write_file", {"path": "other.txt", "content": f"turn {n}\n"})) for n in range(1, 34)]
    stall, seen = detectors(h)
    end, provider = await h.run([*turns, text("done")], interceptors=(stall,), max_turns=40)
    assert end.outcome == "Completed"
    failing = [ids(t)[0] for t in turns]
    assert advisories(h) == [
        (2, "identical_failure", identical_failure_text("read_file", 2), failing[1]),
        (32, "identical_failure", identical_failure_text("read_file", 32), failing[31]),
    ]
    noticed = [n for n, call_id in enumerate(failing, start=1) if h.result(call_id).output.startswith("[retry suppressor]")]
    assert noticed == [2, 32]
    assert sent_result(provider.requests[31], failing[30]).content == h.result(failing[0]).output  # turn 31: still suppressed
    assert sent_result(provider.requests[32], failing[31]).content.startswith(identical_failure_text("read_file", 32) + "\n\nError")
    assert seen.log == []


# ------------------------------------------------------------------ semantic no-progress


def _import(variant: str) -> tuple[str, dict[str, Any]]:
    return ("bash", {"command": f'python3 -c "{variant}"'})


async def test_a_failure_family_three_times_in_ten_observations_raises_an_advisory_and_an_objection(h: Harness) -> None:
    fails = [_import(v) for v in ("import nosuchmod_stalls", "import sys; import nosuchmod_stalls", "import os, nosuchmod_stalls",
                                  "import json; import nosuchmod_stalls")]
    t1 = calls(fails[0], *(("bash", {"command": f"echo ok {n}"}) for n in range(1, 5)))  # observations 1-5
    t2 = calls(fails[1], *(("bash", {"command": f"echo ok {n}"}) for n in range(5, 9)), ("read_file", {"path": "a.txt"}))  # 6-10
    t3 = calls(fails[2])  # 11: the first failure has left the window, so two of the family are in it
    t4 = calls(fails[3])  # 12: three of the family in the last ten
    t5 = calls(("bash", {"command": "python3 -c \"print('fixed')\""}))  # python3 succeeds: withdrawn
    stall, seen = detectors(h)
    end, provider = await h.run([t1, t2, t3, t4, t5, text("done")], interceptors=(stall,))
    check_stream(h.events)
    assert end.outcome == "Completed"
    failed = [h.result(ids(t)[0]) for t in (t1, t2, t3, t4)]
    assert [(r.ok, r.error_category) for r in failed] == [(False, "exit_status")] * 4
    family = Family("bash", "python3", "exit 1", "ModuleNotFoundError: No module named 'nosuchmod_stalls'")
    assert failure_family("bash", dict(fails[3][1]), ToolOutcome(failed[0].output, True, "exit_status")) == family
    advice = no_progress_text(family, 3, 10)
    assert advisories(h) == [(4, "no_progress", advice, ids(t4)[0])]
    assert failed[2].output.endswith("[exit code 1]") and "[no progress]" not in failed[2].output
    assert failed[3].output.startswith(advice + "\n\nTraceback")
    assert sent_result(provider.requests[4], ids(t4)[0]).content.startswith(advice)
    assert "`python3`, exit 1: ModuleNotFoundError: No module named 'nosuchmod_stalls'" in advice
    assert seen.log == [("object", "no_progress", no_progress_objection(family, 3, 10), 12), ("resolve", "no_progress", "", 13)]


async def test_different_failures_of_one_command_are_different_families(h: Harness) -> None:
    t = calls(*(_import(f"import nosuchmod_{n}") for n in ("alpha", "beta", "gamma")))
    stall, seen = detectors(h)
    await h.run([t, text("done")], interceptors=(stall,))
    assert advisories(h) == [] and seen.log == []


# ------------------------------------------------------------------ artifact stasis


async def test_ten_turns_without_a_change_raise_artifact_stasis_and_a_write_withdraws_it(h: Harness) -> None:
    for n in range(20):
        (h.workspace / f"f{n}.txt").write_text(f"file {n}\n")
    reads = [calls(("read_file", {"path": f"f{n}.txt"})) for n in range(20)]
    write = calls(("write_file", {"path": "out.txt", "content": "result\n"}))
    # Five quiet turns, a change (the count restarts), ten quiet turns, one more, then a change.
    script = [*reads[:5], calls(("bash", {"command": "echo first > early.txt"})), *reads[5:16], write, text("done")]
    stall, seen = detectors(h, StallSettings(stasis_objection=True))
    end, provider = await h.run(script, interceptors=(stall,))
    check_stream(h.events)
    assert end.outcome == "Completed"
    told_at = ids(reads[15])[0]  # turn 17: the first result after the tenth quiet turn (16)
    advice = artifact_stasis_text(10)
    assert advisories(h) == [(17, "artifact_stasis", advice, told_at)]
    result = h.result(told_at)
    assert result.ok and result.output == f"{advice}\n\n     1\tfile 15"
    assert sent_result(provider.requests[17], told_at).content == result.output
    assert not sent_result(provider.requests[17], told_at).is_error
    # Raised at the end of turn 16 (16 results so far), withdrawn at the end of the write's turn.
    assert seen.log == [("object", "artifact_stasis", artifact_stasis_objection(10), 16), ("resolve", "artifact_stasis", "", 18)]


async def test_a_new_task_forgets_the_streaks_and_withdraws_open_objections(h: Harness) -> None:
    for n in range(12):
        (h.workspace / f"f{n}.txt").write_text(f"file {n}\n")
    same = ("read_file", {"path": "a.txt"})
    first_task = [*(calls(("read_file", {"path": f"f{n}.txt"})) for n in range(10)), calls(same), calls(same), text("first done")]
    second_task = [calls(same), text("second done")]
    stall, seen = detectors(h, StallSettings(stasis_objection=True))
    session, provider = await h.start([*first_task, *second_task], interceptors=(stall,))
    try:
        first = await session.submit("look around")
        assert seen.log == [("object", "artifact_stasis", artifact_stasis_objection(10), 10)]
        second = await session.submit("read a.txt once more")
    finally:
        await session.close()
    assert (first.outcome, second.outcome) == ("Completed", "Completed")
    # The prompt withdrew the open objection; the third identical read in a row ran (a new task).
    assert seen.log[1:] == [("resolve", "artifact_stasis", "", 12)]
    assert h.result(ids(second_task[0])[0]).ok
    assert [a.detector for a in h.of(Advisory)] == ["artifact_stasis"]


# ------------------------------------------------------------------ the classifier


@pytest.mark.parametrize(("command", "key"), [
    ("pytest -q tests/test_a.py", "pytest"),
    ("cd sub && pytest -q tests/test_a.py 2>&1 | tail -5", "pytest"),
    ("git commit -m 'wip'", "git commit"),
    ("git -C repo status", "git"),
    ("python -m pytest -x", "python -m pytest"),
    ("python3 tools/gen.py --check", "python3 gen.py"),
    ("python3 -c 'import x'", "python3"),
    ("FOO=1 sudo -E timeout 30 make test", "make test"),
    ("env -i PATH=/bin nice -n 5 cargo build --release", "cargo build"),
    ("bash -c 'npm test'", "npm test"),
    ("cd web; npm ci && npm test | tee out.log", "npm test"),
    ("pytest $(ls tests)", "pytest"),
    ("export A=1; echo start", "echo start"),
    ("node_modules/.bin/jest --ci", "jest"),
    ("if [ x ]; then", "if"),  # a syntax error: the first words, split plainly
])
def test_program_key(command: str, key: str) -> None:
    assert program_key(command) == key


def test_normalise_folds_paths_hex_ids_and_digits() -> None:
    line = "/tmp/build-17/x/12ab34cd56: line 42: error 0xdeadbeef in ./src/a.py:12 (id 9f8e7d6c5b, 123e4567-e89b-12d3-a456-426614174000)"
    assert normalise(line) == "<path>: line N: error <hex> in <path>:N (id <hex>, <hex>)"
    assert normalise("a   b\tc") == "a b c"
    assert len(normalise("error " + "x" * 1000)) == 160


def test_error_line_prefers_the_exception_then_the_first_error_word_then_the_last_line() -> None:
    traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nKeyError: 'k'\n[exit code 1]"
    assert error_line(traceback) == "KeyError: 'k'"
    assert error_line("compiling\nsrc/a.c:3:1: error: expected ';'\nsrc/a.c:9:1: error: other\n[exit code 2]") == "src/a.c:3:1: error: expected ';'"
    assert error_line("step one\nstep two\n\n[exit code 3]") == "step two"
    assert error_line("[exit code 1]") == ""


def _bash_failure(command: str, output: str, category: str = "exit_status") -> Family | None:
    return failure_family("bash", {"command": command}, ToolOutcome(output, True, category))


def test_failures_that_differ_only_in_paths_and_numbers_are_one_family() -> None:
    a = _bash_failure("cd /tmp/a && make test", "make: *** [Makefile:12: test] Error 2\n[exit code 2]")
    b = _bash_failure("make test -j4", "make: *** [Makefile:40: test] Error 2\n[exit code 2]")
    assert a is not None and a == b
    assert a == Family("bash", "make test", "exit 2", "make: *** [Makefile:N: test] Error N")
    other_error = _bash_failure("make test", "cc: fatal error: no input files\n[exit code 2]")
    other_status = _bash_failure("make test", "make: *** [Makefile:12: test] Error 2\n[exit code 1]")
    other_command = _bash_failure("make lint", "make: *** [Makefile:12: test] Error 2\n[exit code 2]")
    assert len({a, other_error, other_status, other_command}) == 4


def test_the_status_comes_from_the_tools_status_line() -> None:
    timed_out = _bash_failure("sleep 999", "[timed out after 1 s; the command's process group was killed]", "timeout")
    assert timed_out is not None and (timed_out.command, timed_out.status, timed_out.signature) == ("sleep", "timeout", "")
    killed = _bash_failure("./run.sh", "partial\n[killed by signal 9 (SIGKILL): out of memory, or killed from outside]")
    assert killed is not None and (killed.command, killed.status, killed.signature) == ("run.sh", "signal 9", "partial")


def test_only_failed_process_calls_have_a_family() -> None:
    assert failure_family("bash", {"command": "true"}, ToolOutcome("[exit code 0]")) is None
    assert failure_family("read_file", {"path": "x"}, ToolOutcome("Error (not_found): x does not exist", True, "not_found")) is None
    custom = failure_family("lint_all", {"strict": True}, ToolOutcome("E501 line too long at src/x.py:3\n[lint_all exited with code 4]", True, "exit_status"))
    assert custom == Family("lint_all", "lint_all", "exit 4", "EN line too long at <path>:N")
    assert custom.describe() == "lint_all, exit 4: EN line too long at <path>:N"
    named = failure_family("deploy", {}, ToolOutcome("ok so far", False), StallSettings(process_tools=frozenset({"bash", "deploy"})))
    assert named is None


@pytest.mark.parametrize(("name", "arguments", "ok", "changed"), [
    ("write_file", {"path": "a", "content": ""}, True, True),
    ("edit_file", {"path": "a", "old_string": "x", "new_string": "y"}, True, True),
    ("edit_file", {"path": "a", "old_string": "x", "new_string": "y"}, False, False),
    ("read_file", {"path": "a"}, True, False),
    ("bash", {"command": "echo x > a.txt"}, True, True),
    ("bash", {"command": "echo x > a.txt"}, False, False),
    ("bash", {"command": "make 2>&1 >/dev/null | tail"}, True, False),
    ("bash", {"command": "cat a | tee b"}, True, True),
    ("bash", {"command": "sed -i 's/a/b/' f"}, True, True),
    ("bash", {"command": "sed -n 1p f"}, True, False),
    ("bash", {"command": "git status && git diff"}, True, False),
    ("bash", {"command": "git add -A && git commit -m x"}, True, True),
    ("bash", {"command": "cd x && pytest -q"}, True, False),
    ("bash", {"command": "python3 -c \"open('x', 'w').write('1')\""}, True, True),
    ("bash", {"command": "cat <<EOF > f.txt\nbody\nEOF"}, True, True),
    ("bash", {"command": "mkdir -p build"}, True, True),
    ("bash", {"command": "ruff check --fix ."}, True, True),
    ("bash", {"command": "ruff check ."}, True, False),
    ("bash", {"command": "tar xzf a.tgz"}, True, True),
    ("bash", {"command": "echo 'a > b' && ls"}, True, False),
])
def test_changes_artifacts(name: str, arguments: dict[str, Any], ok: bool, changed: bool) -> None:
    assert changes_artifacts(name, arguments, ToolOutcome("out", not ok, None if ok else "tool_error")) is changed


def test_settings_have_the_spec_defaults() -> None:
    s = StallSettings()
    assert (s.doom_loop_repeats, s.identical_failure_threshold, s.no_progress_matches, s.no_progress_window, s.artifact_stasis_turns, s.suppress_turns) == (3, 2, 3, 10, 10, 30)


async def test_by_default_artifact_stasis_advises_without_objecting(h: Harness) -> None:
    """A task may rightly change nothing (a review): the advisory is given, no objection raised."""
    reads = [calls(("read_file", {"path": f"f{n}.txt"})) for n in range(12)]
    stall, seen = detectors(h)
    end, _ = await h.run([*reads, text("reviewed")], interceptors=(stall,))
    assert end.outcome == "Completed"
    assert [e.detector for e in h.of(Advisory)] == ["artifact_stasis"]
    assert [entry for entry in seen.log if entry[0] == "object"] == []
