"""`--output-schema`: loading and checking the schema file, validating final answers, and the
interceptor driven through the session core: accept valid JSON, ask again on invalid, and end in
an error (never an invalid final answer) after three corrections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from session_harness import Harness, check_stream, text

from osprey.errors import ConfigError
from osprey.events import Notice, UserMessageEvent
from osprey.interception import CompletionCandidate
from osprey.session.output_schema import MAX_SCHEMA_BYTES, OutputSchema, OutputSchemaInterceptor, StructuredOutputExhausted

SCHEMA = {
    "type": "object",
    "properties": {"files": {"type": "array", "items": {"type": "string"}}, "count": {"type": "integer", "minimum": 0},
                   "when": {"type": "string", "format": "date"}},
    "required": ["files", "count"],
    "additionalProperties": False,
}


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return path


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path)


def test_load_reads_and_checks_a_schema(schema_file: Path) -> None:
    schema = OutputSchema.load(schema_file)
    assert schema.schema == SCHEMA and schema.path == str(schema_file)


@pytest.mark.parametrize(("content", "problem"), [
    (None, "no such file"),
    (b"{not json", "not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2"),
    (b"\xff\xfe", "not UTF-8 text"),
    (b"[1, 2]", "a JSON Schema is an object (or true/false), not list"),
    (b'{"type": "nope"}', "not a valid JSON Schema (Draft 2020-12) at type: 'nope' is not valid"),
    (b'{"properties": {"a": {"minimum": "zero"}}}', "at properties/a/minimum: 'zero' is not of type 'number'"),
    (b" " * (MAX_SCHEMA_BYTES + 1), f"larger than {MAX_SCHEMA_BYTES // 1024} KiB"),
])
def test_load_says_what_is_wrong(tmp_path: Path, content: bytes | None, problem: str) -> None:
    path = tmp_path / "schema.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        OutputSchema.load(path)
    assert str(caught.value).startswith(f"--output-schema {path}: ")
    assert problem in str(caught.value)


def test_load_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        OutputSchema.load(tmp_path)


@pytest.mark.parametrize(("answer", "value"), [
    ('{"files": ["a.py"], "count": 1}', {"files": ["a.py"], "count": 1}),
    ('  \n{"files": [], "count": 0}\n', {"files": [], "count": 0}),
    ('Here it is:\n```json\n{"files": ["b"], "count": 2, "when": "2026-12-03"}\n```\nThanks.', {"files": ["b"], "count": 2, "when": "2026-12-03"}),
    ('```JSON\n{"files": [], "count": 3}```', {"files": [], "count": 3}),
])
def test_validate_accepts_json_or_one_fenced_block(schema_file: Path, answer: str, value: object) -> None:
    assert OutputSchema.load(schema_file).validate(answer) == (value, None)


@pytest.mark.parametrize(("answer", "problem"), [
    ("", "the answer is empty"),
    ("The files are a.py and b.py.", "the answer is not JSON (Expecting value at line 1, column 1)"),
    ('```json\n{"files": [}\n```', "the ```json block is not valid JSON"),
    ('```json\n{"files": [], "count": 1}\n```\n```json\n{}\n```', "the answer has 2 ```json blocks"),
    ('{"files": "a.py"}', "at /: 'count' is a required property; at /files: 'a.py' is not of type 'array'"),
    ('{"files": [], "count": -1}', "at /count: -1 is less than the minimum of 0"),
    ('{"files": [], "count": 1, "when": "yesterday"}', "at /when: 'yesterday' is not a 'date'"),
    ('{"files": [], "count": 1, "extra": true}', "Additional properties are not allowed ('extra' was unexpected)"),
])
def test_validate_says_what_is_wrong(schema_file: Path, answer: str, problem: str) -> None:
    value, said = OutputSchema.load(schema_file).validate(answer)
    assert value is None and said is not None and problem in said


async def test_a_valid_answer_completes_and_the_model_was_told_the_schema(harness: Harness, schema_file: Path) -> None:
    interceptor = OutputSchemaInterceptor(OutputSchema.load(schema_file))
    end, provider = await harness.run([text('{"files": ["x.py"], "count": 1}')], prompt="List the files.", interceptors=(interceptor,))
    check_stream(harness.events)
    assert (end.outcome, end.exit_status) == ("Completed", 0)
    assert interceptor.value == {"files": ["x.py"], "count": 1}
    assert interceptor.final_json() == '{"files": ["x.py"], "count": 1}'
    prompt = provider.requests[0].messages[0].content  # type: ignore[union-attr]
    assert prompt.startswith("List the files.\n\n[context] Your final answer must be one JSON value that validates against this JSON Schema")
    assert json.dumps(SCHEMA, separators=(",", ":")) in prompt


async def test_an_invalid_answer_is_sent_back_with_the_problem(harness: Harness, schema_file: Path) -> None:
    interceptor = OutputSchemaInterceptor(OutputSchema.load(schema_file))
    end, provider = await harness.run([
        text("There is one file: x.py"),
        text('{"files": ["x.py"]}'),
        text('```json\n{"files": ["x.py"], "count": 1}\n```'),
    ], interceptors=(interceptor,))
    assert end.outcome == "Completed" and interceptor.value == {"files": ["x.py"], "count": 1}
    first, second = [e.text for e in harness.of(UserMessageEvent) if e.origin == "loop"]
    assert first.startswith("Your final answer was rejected: the answer is not JSON (Expecting value at line 1, column 1)")
    assert first.endswith("(Attempt 1 of 3 to correct it.)")
    assert second.startswith("Your final answer was rejected: the JSON does not satisfy the schema: at /: 'count' is a required property.")
    assert provider.requests[2].messages[-1].content == second  # type: ignore[union-attr]


async def test_the_fourth_invalid_answer_raises_exhaustion_and_a_new_task_starts_afresh(schema_file: Path) -> None:
    interceptor = OutputSchemaInterceptor(OutputSchema.load(schema_file), instruct=False)
    from osprey.interception import PromptSubmission

    assert await interceptor.prompt_submitted(PromptSubmission(text="go", session_id="s")) is None
    bad = CompletionCandidate(turn=1, text="[]", session_id="s")
    for attempt in (1, 2, 3):
        again = await interceptor.completion_candidate(bad)
        assert again is not None and f"(Attempt {attempt} of 3 to correct it.)" in again.reason
    with pytest.raises(StructuredOutputExhausted) as caught:
        await interceptor.completion_candidate(bad)
    assert caught.value.attempts == 4
    assert str(caught.value) == ("structured output exhausted: 4 final answers in a row did not satisfy the output schema; "
                                 "the last: the JSON does not satisfy the schema: at /: [] is not of type 'object'")
    assert interceptor.final_json() is None
    await interceptor.prompt_submitted(PromptSubmission(text="again", session_id="s"))
    assert await interceptor.completion_candidate(bad) is not None  # the count is per task


async def test_exhausted_structured_output_ends_in_an_error_without_a_final_answer(harness: Harness, schema_file: Path) -> None:
    interceptor = OutputSchemaInterceptor(OutputSchema.load(schema_file))
    end, _ = await harness.run([text("no"), text("still no"), text("[]"), text('{"files": 1}')], interceptors=(interceptor,))
    assert (end.outcome, end.exit_status, end.final_text) == ("Error", 1, "")
    assert end.error is not None and end.error.startswith("structured output exhausted: 4 final answers in a row")
    assert not any(isinstance(e, Notice) and "failed at a completion candidate" in e.message for e in harness.events)


def test_load_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "schema.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        OutputSchema.load(fifo)
