"""`--output-schema PATH`: the final answer must be JSON that validates against a JSON Schema
(Draft 2020-12), whatever the provider's own structured-output support did.

`OutputSchema.load` reads and checks the schema (bounded; a `ConfigError` that says what is wrong).
`OutputSchemaInterceptor` judges every completion candidate: the answer must be one JSON value (the
whole text, or one fenced ```json block) that validates. An invalid answer gets another turn with
the problem, up to `max_retries` (3) times per task; the next invalid answer raises
`StructuredOutputExhausted`, which the loop turns into an `Error` outcome, so an invalid object
never becomes the final answer. The value that passed is `interceptor.value` (and `final_json()`,
the text a headless run prints as its final answer).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, OspreyError
from ..interception import CompletionCandidate, Continuation, Interceptor, Order, PromptSubmission, PromptVerdict

MAX_SCHEMA_BYTES = 1024 * 1024
MAX_ANSWER_CHARS = 4 * 1024 * 1024
MAX_RETRIES = 3
MAX_PROBLEMS = 10
# The schema is repeated to the model with the prompt when it is at most this long.
MAX_SCHEMA_IN_PROMPT = 20_000
_FENCE = re.compile(r"```[ \t]*json[ \t]*\r?\n(.*?)\r?\n?[ \t]*```", re.DOTALL | re.IGNORECASE)


class StructuredOutputExhausted(OspreyError):
    """The model's final answers failed the output schema more times than allowed: the task ends
    with an Error outcome (exit status 1) and no final answer."""

    def __init__(self, attempts: int, problem: str) -> None:
        super().__init__(f"structured output exhausted: {attempts} final answers in a row did not satisfy the output schema; the last: {problem}")
        self.attempts = attempts
        self.problem = problem


@dataclass(frozen=True)
class OutputSchema:
    path: str
    schema: dict[str, Any] | bool
    validator: Any

    @classmethod
    def load(cls, path: str | Path) -> OutputSchema:
        """Read and check a JSON Schema file; a ConfigError naming the file and the problem."""
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        from ..files import FileRefused, read_file

        where = f"--output-schema {path}"
        if os.path.isdir(path):
            raise ConfigError(f"{where}: is a directory, not a JSON Schema file")
        try:
            raw = read_file(path, MAX_SCHEMA_BYTES, follow_symlinks=True)
        except FileRefused as exc:
            if exc.reason == "too_large":
                raise ConfigError(f"{where}: larger than {MAX_SCHEMA_BYTES // 1024} KiB; a JSON Schema that large is not supported") from None
            if exc.reason == "not_regular":
                raise ConfigError(f"{where}: not a regular file, so not a JSON Schema file") from None
            raise ConfigError(f"{where}: cannot be read: {exc.strerror}") from None
        if raw is None:
            raise ConfigError(f"{where}: no such file")
        try:
            schema = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ConfigError(f"{where}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
        if not isinstance(schema, (dict, bool)):
            raise ConfigError(f"{where}: a JSON Schema is an object (or true/false), not {type(schema).__name__}")
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            at = "/".join(str(p) for p in exc.absolute_path) or "the top level"
            raise ConfigError(f"{where}: not a valid JSON Schema (Draft 2020-12) at {at}: {exc.message[:500]}") from None
        validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        return cls(str(path), schema, validator)

    def validate(self, final_text: str) -> tuple[Any, str | None]:
        """(the value, None) when the answer is valid; (None, what is wrong) otherwise."""
        text = final_text.strip()
        if len(text) > MAX_ANSWER_CHARS:
            return None, f"the answer is longer than {MAX_ANSWER_CHARS // (1024 * 1024)} MiB"
        if not text:
            return None, "the answer is empty; it must be one JSON value"
        try:
            value = json.loads(text)
        except json.JSONDecodeError as whole:
            blocks = _FENCE.findall(text)
            if len(blocks) > 1:
                return None, f"the answer has {len(blocks)} ```json blocks; give exactly one JSON value"
            if not blocks:
                return None, f"the answer is not JSON ({whole.msg} at line {whole.lineno}, column {whole.colno}); give only the JSON value, or one ```json block"
            try:
                value = json.loads(blocks[0])
            except json.JSONDecodeError as exc:
                return None, f"the ```json block is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        try:
            errors = sorted(self.validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
        except Exception as exc:  # noqa: BLE001 - an unresolvable $ref and the like: the schema's fault, reported
            return None, f"the schema could not be applied ({type(exc).__name__}: {str(exc)[:300]})"
        if not errors:
            return value, None
        problems = []
        for error in errors[:MAX_PROBLEMS]:
            at = "/" + "/".join(str(p) for p in error.absolute_path)
            problems.append(f"at {at}: {error.message[:300]}")
        more = len(errors) - len(problems)
        return None, "the JSON does not satisfy the schema: " + "; ".join(problems) + (f"; and {more} more problems" if more else "")

    def instructions(self) -> str:
        """What the model is told about the required answer."""
        text = json.dumps(self.schema, separators=(",", ":"), ensure_ascii=False)
        if len(text) > MAX_SCHEMA_IN_PROMPT:
            return (f"Your final answer must be one JSON value that validates against the JSON Schema in {self.path} (Draft 2020-12); "
                    "read that file for it. Answer with only the JSON value (or one ```json block), no other text.")
        return ("Your final answer must be one JSON value that validates against this JSON Schema (Draft 2020-12): "
                f"{text}\nAnswer with only the JSON value (or one ```json block), no other text.")


class OutputSchemaInterceptor(Interceptor):
    """Holds back final answers that fail the schema; see the module docstring. Put it after the
    finalization adjudicator, so a candidate the adjudicator sends back costs no schema attempt."""

    order = Order.OUTPUT_SCHEMA

    name = "output_schema"

    def __init__(self, schema: OutputSchema, *, max_retries: int = MAX_RETRIES, instruct: bool = True) -> None:
        self.schema = schema
        self.max_retries = max_retries
        self.instruct = instruct
        self.failures = 0  # invalid answers in the current task
        self.value: Any = None
        self.accepted = False

    async def prompt_submitted(self, prompt: PromptSubmission) -> PromptVerdict | None:
        self.failures = 0
        self.value, self.accepted = None, False
        return PromptVerdict(context=self.schema.instructions(), source=self.name) if self.instruct else None

    async def completion_candidate(self, candidate: CompletionCandidate) -> Continuation | None:
        value, problem = self.schema.validate(candidate.text)
        if problem is None:
            self.value, self.accepted = value, True
            return None
        self.failures += 1
        if self.failures > self.max_retries:
            raise StructuredOutputExhausted(self.failures, problem)
        return Continuation(
            f"Your final answer was rejected: {problem}. Reply with only the corrected JSON value (or one ```json block) "
            f"that satisfies the required schema. (Attempt {self.failures} of {self.max_retries} to correct it.)",
            self.name,
        )

    def final_json(self) -> str | None:
        """The accepted value as compact JSON text (None before an answer was accepted)."""
        return json.dumps(self.value, ensure_ascii=False) if self.accepted else None
