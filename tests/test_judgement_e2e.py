"""The loop's judgement end to end: the real `osprey agent` command in a subprocess against the
loopback model server misbehaving on purpose.

Each test scripts a model that goes wrong one way (empty answers, the same call forever, the same
failing call with other calls between, a 503, a stalled stream, answers that fail the output
schema, a failed verification run, a turn limit) and checks the exact outcome, the exit status, the
events of the JSON Lines stream (`advisory`, `notice`, `verification`, `task_end`, `session_end`),
and what the model was told: the tool results and user messages of the NEXT request the model
server received. Nothing is patched; the bash calls run for real in a temporary workspace.

Not repeated here (tests/test_budget_retry.py has them): 429 with Retry-After, a session budget
that runs out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from osprey.session.loop import EMPTY_CORRECTION
from osprey.session.stalls import doom_loop_text, identical_failure_text
from osprey.testing.model_server import ModelServer, RecordedRequest, Reply
from osprey.tools.control import NO_ONE_TO_ASK

pytestmark = pytest.mark.e2e

RUN_TIMEOUT = 60  # seconds; a ceiling for one run on a loaded machine (each run takes a few seconds)
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider test_calc.py"
BROKEN_CALC = "def add(a, b):\n    return a - b\n"
FIXED_CALC = "def add(a, b):\n    return a + b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"], "additionalProperties": False}


@dataclass(repr=False)
class Run:
    rc: int
    stdout: str
    stderr: str

    @property
    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    @property
    def end(self) -> dict[str, Any]:
        return self.events[-1]

    def notices(self) -> list[str]:
        return [e["message"] for e in self.of("notice")]

    def __repr__(self) -> str:  # shown when an assertion on a Run fails
        return f"exit {self.rc}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@dataclass
class Dirs:
    workspace: Path
    home: Path


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return Dirs(workspace, home)


def git_dirs(tmp_path: Path) -> Dirs:
    """A workspace that is a repository's root (it holds `.git`), and a home."""
    dirs = Dirs(tmp_path / "ws", tmp_path / "home")
    (dirs.workspace / ".git").mkdir(parents=True)
    dirs.home.mkdir()
    return dirs


def run_agent(server: ModelServer, dirs: Dirs, *flags: str, prompt: str, env: dict[str, str] | None = None,
              timeout: float = RUN_TIMEOUT) -> Run:
    """`osprey agent` in a subprocess against `server`, in `dirs`, with no OSPREY_, OPENAI_ or
    ANTHROPIC_ variable from this environment (`env` adds some)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OSPREY_", "OPENAI_", "ANTHROPIC_"))}
    base.update(OSPREY_HOME=str(dirs.home), OPENAI_API_KEY="test-key", **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "osprey", "agent", "-C", str(dirs.workspace), "--provider", "openai", "--model", "m",
                           "--base-url", server.base_url, *flags, prompt], env=base, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def agent(server: ModelServer, dirs: Dirs, *flags: str, prompt: str = "Do it.") -> Run:
    return run_agent(server, dirs, "--yolo", *flags, prompt=prompt)


def told(request: RecordedRequest) -> list[dict[str, Any]]:
    """What the model was told since its last turn: the messages after the last assistant message
    of a request (tool results and user messages), as {"role", "content"}."""
    messages = request.body["messages"]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=0)
    return [{"role": m["role"], "content": m["content"]} for m in messages[last + 1:]]


def assert_ended(run: Run, outcome: str, exit_status: int, *, final_text: str = "", error: str | None = None) -> None:
    """task_end and session_end agree on the outcome, and the process exits with its status."""
    [task_end] = run.of("task_end")
    [session_end] = run.of("session_end")
    assert run.end == session_end, run
    for end in (task_end, session_end):
        assert (end["outcome"], end["exit_status"], end["final_text"]) == (outcome, exit_status, final_text), run
        if error is None:
            assert end["error"] is None, run
        else:
            assert end["error"] is not None and error in end["error"], run
    assert run.rc == exit_status, run


def write_config(dirs: Dirs, text: str) -> None:
    (dirs.home / "config.toml").write_text(textwrap.dedent(text))


# --------------------------------------------------------------------------- empty answers


def test_two_empty_answers_are_tolerated_each_followed_by_a_correction(dirs: Dirs) -> None:
    with ModelServer([Reply.text(""), Reply.text("  \n"), Reply.text("done")]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="done")
    assert len(requests) == 3
    for request in requests[1:]:
        assert told(request)[-1] == {"role": "user", "content": EMPTY_CORRECTION}
    assert run.notices().count("the model returned an empty reply; asking it to continue") == 2
    corrections = [e for e in run.of("user_message") if e["origin"] == "loop"]
    assert [e["text"] for e in corrections] == [EMPTY_CORRECTION] * 2


def test_three_empty_answers_in_a_row_end_the_run_with_an_error(dirs: Dirs) -> None:
    with ModelServer([Reply.text(""), Reply.text(""), Reply.text(""), Reply.text("never asked")]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Error", 1, error="the model returned 3 empty replies in a row")
    assert run.end["error"] == "the model returned 3 empty replies in a row"
    assert len(requests) == 3
    assert [told(r)[-1]["content"] for r in requests[1:]] == [EMPTY_CORRECTION] * 2
    assert "osprey: error: the model returned 3 empty replies in a row" in run.stderr


# --------------------------------------------------------------------------- the same call forever


def test_the_same_call_a_third_time_is_not_run_and_the_model_is_told_to_change_approach(dirs: Dirs) -> None:
    command = "echo ran >> calls.log"
    replies = [Reply.tool_call("bash", {"command": command}, id=f"call_{i}") for i in (1, 2, 3, 4)]
    with ModelServer([*replies, Reply.text("I will stop repeating myself.")]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="I will stop repeating myself.")
    # The command ran exactly twice: the third and fourth identical calls were never dispatched.
    assert (dirs.workspace / "calls.log").read_text() == "ran\nran\n"
    results = run.of("tool_result")
    assert [(r["id"], r["ok"], r["error_category"]) for r in results] == [
        ("call_1", True, None), ("call_2", True, None), ("call_3", False, "doom_loop"), ("call_4", False, "doom_loop")]
    # One advisory event: the same advisory again is suppressed, the denial is not.
    [advisory] = run.of("advisory")
    third = doom_loop_text("bash", 3)
    assert (advisory["detector"], advisory["call_id"], advisory["message"]) == ("doom_loop", "call_3", third)
    # What the model was told about the third and the fourth call, in the next requests.
    assert len(requests) == 5
    assert told(requests[3]) == [{"role": "tool", "content": f"Error (doom_loop): {third}"}]
    assert told(requests[4]) == [{"role": "tool", "content": f"Error (doom_loop): {doom_loop_text('bash', 4)}"}]
    assert "Change your approach" in third
    # The first two results were the command's real (empty) output, with no advisory.
    assert all("Change your approach" not in m["content"] for r in requests[1:3] for m in told(r))


# --------------------------------------------------------------------------- the same failing call, other calls between


def test_the_same_failing_call_with_other_calls_between_gets_the_retry_suppressor(dirs: Dirs) -> None:
    failing = {"command": "cat missing.txt"}
    with ModelServer([
        Reply.tool_call("bash", failing, id="fail_1"),
        Reply.tool_call("bash", {"command": "echo something else"}, id="other"),
        Reply.tool_call("list_directory", {"path": "."}, id="listing"),
        Reply.tool_call("bash", failing, id="fail_2"),
        Reply.text("The file does not exist."),
    ]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="The file does not exist.")
    results = {r["id"]: r for r in run.of("tool_result")}
    assert not results["fail_1"]["ok"] and not results["fail_2"]["ok"] and results["other"]["ok"]
    notice = identical_failure_text("bash", 2)
    [advisory] = run.of("advisory")
    assert (advisory["detector"], advisory["call_id"], advisory["message"]) == ("identical_failure", "fail_2", notice)
    # The first failure's result is plain; the second starts with the notice, the error after it.
    [first] = told(requests[1])
    assert "[retry suppressor]" not in first["content"] and "missing.txt" in first["content"]
    [second] = told(requests[4])
    assert second["content"].startswith(notice), second
    assert "missing.txt" in second["content"][len(notice):]
    assert results["fail_2"]["output"].startswith(notice)


def test_a_matching_success_resets_the_failure_count(dirs: Dirs) -> None:
    call = {"command": "cat flaky.txt"}
    with ModelServer([
        Reply.tool_call("bash", call, id="fail_1"),
        Reply.tool_call("write_file", {"path": "flaky.txt", "content": "here\n"}, id="make"),
        Reply.tool_call("bash", call, id="pass"),
        Reply.tool_call("bash", {"command": "rm flaky.txt"}, id="remove"),
        Reply.tool_call("bash", call, id="fail_2"),
        Reply.text("flaky.txt is gone again."),
    ]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="flaky.txt is gone again.")
    results = {r["id"]: r for r in run.of("tool_result")}
    assert [results[i]["ok"] for i in ("fail_1", "pass", "fail_2")] == [False, True, False]
    assert run.of("advisory") == []
    [last] = told(requests[5])
    assert "[retry suppressor]" not in last["content"] and "flaky.txt" in last["content"]


# --------------------------------------------------------------------------- retries and stalled streams


def test_a_503_without_retry_after_waits_the_first_scheduled_second(dirs: Dirs) -> None:
    with ModelServer([Reply.error(503, "overloaded"), Reply.text("done")]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="done")
    assert len(requests) == 2 and requests[0].body["messages"] == requests[1].body["messages"]
    retries = [n for n in run.notices() if n.startswith("retrying the model request")]
    assert len(retries) == 1, run.notices()
    assert retries[0].startswith("retrying the model request in 1 s (retry 1 of 3): "), retries
    assert "as the server asked" not in retries[0] and "overloaded" in retries[0]


def test_two_stalled_turns_in_a_row_end_actionless_timeout(dirs: Dirs) -> None:
    write_config(dirs, """\
        [retry]
        turn_timeout = 1.5
        """)
    with ModelServer([Reply.hold(1, Reply.text("never finished")), Reply.hold(1, Reply.text("never finished either")),
                      Reply.text("never asked")]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "ActionlessTimeout", 1, error="the model did not answer within 1.5 s")
    assert run.end["error"] == "the model did not answer within 1.5 s, 2 turns in a row", run
    assert len(requests) == 2, run
    assert run.notices() == ["the model did not answer within 1.5 s; asking again"], run
    assert run.of("assistant_text") == []


def test_stalled_turns_with_an_answer_between_are_not_in_a_row(dirs: Dirs) -> None:
    write_config(dirs, """\
        [retry]
        turn_timeout = 1.5
        """)
    with ModelServer([Reply.hold(1, Reply.text("never finished")), Reply.tool_call("bash", {"command": "echo hi"}),
                      Reply.hold(1, Reply.text("never finished either")), Reply.text("done")]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="done")
    assert len(requests) == 4
    assert run.notices() == ["the model did not answer within 1.5 s; asking again"] * 2, run
    # A stalled turn leaves nothing in the conversation: the model is asked the same again.
    assert requests[0].body["messages"] == requests[1].body["messages"]
    assert requests[2].body["messages"] == requests[3].body["messages"]


# --------------------------------------------------------------------------- --output-schema


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return path


def test_a_valid_structured_answer_completes_with_the_compact_json(dirs: Dirs, schema_file: Path) -> None:
    with ModelServer([Reply.text('{\n  "answer" :   42\n}\n')]) as server:
        run = agent(server, dirs, "--output-schema", str(schema_file))
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text='{"answer": 42}')
    # The model was told the schema with the prompt.
    [prompt] = told(requests[0])
    assert prompt["role"] == "user" and prompt["content"].startswith("Do it.")
    assert "Your final answer must be one JSON value that validates against this JSON Schema (Draft 2020-12)" in prompt["content"]
    assert json.dumps(SCHEMA, separators=(",", ":")) in prompt["content"]


def test_a_structured_answer_in_a_json_fence_is_accepted(dirs: Dirs, schema_file: Path) -> None:
    with ModelServer([Reply.text('Here it is:\n```json\n{"answer": 7}\n```\n')]) as server:
        run = agent(server, dirs, "--output-schema", str(schema_file))
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text='{"answer": 7}')


def test_an_invalid_structured_answer_is_asked_again_with_the_problem(dirs: Dirs, schema_file: Path) -> None:
    with ModelServer([Reply.text('{"answer": "forty-two"}'), Reply.text('{"answer": 42}')]) as server:
        run = agent(server, dirs, "--output-schema", str(schema_file))
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text='{"answer": 42}')
    [correction] = told(requests[1])
    assert correction["role"] == "user"
    assert correction["content"].startswith(
        "Your final answer was rejected: the JSON does not satisfy the schema: at /answer: 'forty-two' is not of type 'integer'.")
    assert "(Attempt 1 of 3 to correct it.)" in correction["content"]
    assert any(n.startswith("output_schema asked for another turn: Your final answer was rejected") for n in run.notices())


def test_structured_output_exhausted_ends_error_without_the_invalid_object(dirs: Dirs, schema_file: Path) -> None:
    invalid = ['not JSON at all', '{"answer": 1.5}', '{"answer": 1, "extra": true}', '{"answer": "last"}']
    with ModelServer([*map(Reply.text, invalid), Reply.text('{"answer": 1}')]) as server:
        run = agent(server, dirs, "--output-schema", str(schema_file))
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Error", 1, error="structured output exhausted")
    assert run.end["error"].startswith("structured output exhausted: 4 final answers in a row did not satisfy the output schema; "
                                       "the last: the JSON does not satisfy the schema: at /answer: 'last' is not of type 'integer'")
    assert len(requests) == 4  # three corrections, then the end: the fifth reply was never asked for
    corrections = [told(r)[-1]["content"] for r in requests[1:]]
    assert corrections[0].startswith("Your final answer was rejected: the answer is not JSON (")
    assert "at /answer: 1.5 is not of type 'integer'" in corrections[1]
    assert "Additional properties are not allowed ('extra' was unexpected)" in corrections[2]
    assert [f"(Attempt {n} of 3 to correct it.)" in c for n, c in enumerate(corrections, 1)] == [True] * 3
    # No invalid object reaches stdout as the final answer.
    assert all(e["final_text"] == "" for e in run.of("task_end") + run.of("session_end"))
    assert '"last"' not in "".join(json.dumps(e) for e in run.events if e["type"] in ("task_end", "session_end"))


@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "not valid JSON: "),
    ('{"type": 5}', "not a valid JSON Schema (Draft 2020-12) at type: "),
    ('["a list"]', "a JSON Schema is an object (or true/false), not list"),
    (b"\xff\xfe{}", "not UTF-8 text"),
])
def test_a_bad_schema_file_stops_the_run_before_any_model_request(dirs: Dirs, tmp_path: Path, content: str | bytes, problem: str) -> None:
    path = tmp_path / "bad-schema.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with ModelServer([Reply.text('{"answer": 1}')]) as server:
        run = agent(server, dirs, "--output-schema", str(path))
        asked = len(server.requests)
    assert run.rc == 1, run
    assert f"--output-schema {path}: {problem}" in run.stderr, run
    assert asked == 0
    assert run.of("task_end") == [] and run.of("session_end") == []


def test_a_missing_schema_file_is_a_usage_error(dirs: Dirs, tmp_path: Path) -> None:
    with ModelServer([Reply.text('{"answer": 1}')]) as server:
        run = agent(server, dirs, "--output-schema", str(tmp_path / "nowhere.json"))
        asked = len(server.requests)
    assert run.rc == 2, run
    assert "--output-schema" in run.stderr and "does not exist" in run.stderr, run
    assert asked == 0 and run.events == []


# --------------------------------------------------------------------------- verification and the adjudicator


def test_a_failed_verification_holds_back_the_answer_until_a_passing_rerun(dirs: Dirs) -> None:
    (dirs.workspace / "calc.py").write_text(BROKEN_CALC)
    (dirs.workspace / "test_calc.py").write_text(TEST_CALC)
    with ModelServer([
        Reply.tool_call("bash", {"command": PYTEST}, id="run_1"),
        Reply.text("All done."),
        Reply.tool_call("write_file", {"path": "calc.py", "content": FIXED_CALC}, id="fix"),
        Reply.tool_call("bash", {"command": PYTEST}, id="run_2"),
        Reply.text("Fixed add; the tests pass."),
    ]) as server:
        run = agent(server, dirs, prompt="Fix add in calc.py.")
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="Fixed add; the tests pass.")
    results = {r["id"]: r for r in run.of("tool_result")}
    assert (results["run_1"]["ok"], results["run_1"]["error_category"]) == (False, "exit_status")
    assert results["run_2"]["ok"], results["run_2"]
    # The first answer was a candidate the adjudicator sent back, naming the failure.
    assert len(requests) == 5
    [objection] = told(requests[2])
    assert objection["role"] == "user"
    assert objection["content"].startswith("The task is not finished: these verification objections are still open.\n")
    assert f"- FAILED: {PYTEST} (exit 1)" in objection["content"]
    assert "(Osprey's finalization check, continuation 1 of 150.)" in objection["content"]
    assert any(n.startswith("finalization asked for another turn: The task is not finished") for n in run.notices())
    loop_messages = [e["text"] for e in run.of("user_message") if e["origin"] == "loop"]
    assert loop_messages == [objection["content"]]
    # The verification events: the objection, then the evidence that withdrew it.
    checkpoints = run.of("verification")
    assert checkpoints[0]["objections"] == [f"FAILED: {PYTEST} (exit 1)"] and checkpoints[0]["evidence"] == []
    last = checkpoints[-1]
    assert last["objections"] == [] and last["evidence"] == [f"PASSED: {PYTEST} (failed before)"]
    assert "changed calc.py" in last["claims"]
    assert (dirs.workspace / "calc.py").read_text() == FIXED_CALC


def test_a_change_after_a_failure_needs_a_fresh_passing_run(dirs: Dirs) -> None:
    """Passed, then a file changed with a failure earlier in the session: the answer is held until
    verification passes again (the objection itself is gone, the failure is history)."""
    (dirs.workspace / "calc.py").write_text(BROKEN_CALC)
    (dirs.workspace / "test_calc.py").write_text(TEST_CALC)
    with ModelServer([
        Reply.tool_call("bash", {"command": PYTEST}, id="run_1"),
        Reply.tool_call("write_file", {"path": "calc.py", "content": FIXED_CALC}, id="fix"),
        Reply.tool_call("bash", {"command": PYTEST}, id="run_2"),
        Reply.tool_call("write_file", {"path": "notes.txt", "content": "fixed\n"}, id="notes"),
        Reply.text("Done."),
        Reply.tool_call("bash", {"command": PYTEST}, id="run_3"),
        Reply.text("Done, verified."),
    ]) as server:
        run = agent(server, dirs, prompt="Fix add in calc.py.")
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="Done, verified.")
    [reason] = told(requests[5])
    assert reason["role"] == "user"
    assert reason["content"].startswith("You changed files (notes.txt) and ran no verification since. A verification command failed earlier")
    assert run.of("verification")[-1]["evidence"] == [f"PASSED: {PYTEST} (failed before)"]


# --------------------------------------------------------------------------- the control tools headless


@pytest.mark.parametrize(("status", "final"), [("done", "Fixed it and ran the tests."), ("blocked", "blocked: I need the API key.")])
def test_task_status_headless_ends_the_task_with_its_summary(dirs: Dirs, status: str, final: str) -> None:
    summary = final.removeprefix("blocked: ")
    with ModelServer([Reply.tool_call("task_status", {"status": status, "summary": summary}), Reply.text("never asked")]) as server:
        run = agent(server, dirs)
        asked = len(server.requests)
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text=final)
    assert asked == 1
    [event] = run.of("task_status")
    assert (event["status"], event["summary"]) == (status, summary)
    [result] = run.of("tool_result")
    assert result["ok"] and result["output"].startswith(f"Recorded: {status}.")


def test_task_status_done_does_not_clear_a_failed_verification(dirs: Dirs) -> None:
    (dirs.workspace / "calc.py").write_text(BROKEN_CALC)
    (dirs.workspace / "test_calc.py").write_text(TEST_CALC)
    with ModelServer([
        Reply.tool_call("bash", {"command": PYTEST}, id="run_1"),
        Reply.tool_call("task_status", {"status": "done", "summary": "All good."}, id="declare_1"),
        Reply.tool_call("write_file", {"path": "calc.py", "content": FIXED_CALC}, id="fix"),
        Reply.tool_call("bash", {"command": PYTEST}, id="run_2"),
        Reply.tool_call("task_status", {"status": "done", "summary": "Fixed add; the tests pass."}, id="declare_2"),
        Reply.text("never asked"),
    ]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="Fixed add; the tests pass.")
    assert len(requests) == 5
    # The first declaration was sent back: its tool result, then the adjudicator's reason.
    result, reason = told(requests[2])
    assert result["role"] == "tool" and result["content"].startswith("Recorded: done.")
    assert reason["role"] == "user"
    assert reason["content"].startswith("The task is not finished: these verification objections are still open.\n")
    assert f"- FAILED: {PYTEST} (exit 1)" in reason["content"]
    assert "Declaring the task done does not clear them." in reason["content"]
    assert [e["status"] for e in run.of("task_status")] == ["done", "done"]
    checkpoints = run.of("verification")
    assert checkpoints[0]["objections"] == [f"FAILED: {PYTEST} (exit 1)"]
    assert "claimed: task_status done: All good." in checkpoints[-1]["claims"]
    assert checkpoints[-1]["objections"] == []


def test_declaring_done_again_and_again_never_bypasses_an_open_objection(dirs: Dirs) -> None:
    (dirs.workspace / "calc.py").write_text(BROKEN_CALC)
    (dirs.workspace / "test_calc.py").write_text(TEST_CALC)
    # Each declaration in other words, so the doom-loop detector does not step in.
    declarations = [Reply.tool_call("task_status", {"status": "done", "summary": f"All good, really ({n})."}) for n in range(1, 7)]
    with ModelServer([Reply.tool_call("bash", {"command": PYTEST}), *declarations]) as server:
        run = agent(server, dirs, "--max-turns", "6")
        requests = server.requests
        server.assert_clean()
    # Every declaration is sent back naming the failure, until the turn limit ends the run.
    reasons = [told(r)[-1]["content"] for r in requests[2:]]
    assert reasons and all(f"- FAILED: {PYTEST} (exit 1)" in r for r in reasons), reasons
    assert run.of("verification")[-1]["objections"] == [f"FAILED: {PYTEST} (exit 1)"]
    assert_ended(run, "MaxContinuations", 1, error="the model was still working after 6 turns (--max-turns)")


def test_a_question_headless_is_told_no_one_can_be_asked(dirs: Dirs) -> None:
    with ModelServer([Reply.tool_call("question", {"question": "Tabs or spaces?"}, id="ask"),
                      Reply.text("I chose spaces.")]) as server:
        run = agent(server, dirs)
        requests = server.requests
        server.assert_clean()
    assert_ended(run, "Completed", 0, final_text="I chose spaces.")
    [result] = run.of("tool_result")
    assert (result["ok"], result["error_category"]) == (False, "not_interactive")
    [event] = run.of("question")
    assert (event["question"], event["answer"]) == ("Tabs or spaces?", None)
    [answer] = told(requests[1])
    assert answer["role"] == "tool" and NO_ONE_TO_ASK in answer["content"]


# --------------------------------------------------------------------------- the turn limit


def test_max_turns_with_a_model_that_keeps_calling_tools_ends_max_continuations(dirs: Dirs) -> None:
    with ModelServer([Reply.tool_call("bash", {"command": f"echo step {i} >> steps.log"}) for i in range(1, 5)]) as server:
        run = agent(server, dirs, "--max-turns", "2")
        asked = len(server.requests)
        server.assert_clean()
    assert_ended(run, "MaxContinuations", 1, error="the model was still working after 2 turns (--max-turns)")
    assert run.of("session_start")[0]["max_turns"] == 2
    assert asked == 2
    assert (dirs.workspace / "steps.log").read_text() == "step 1\nstep 2\n"
    assert run.end["turns"] == 2
