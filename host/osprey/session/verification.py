"""The verification checkpoint: what the task claims, the evidence for it, and the objections still
open against completing it.

- A successful `write_file` or `edit_file` records a claim `changed PATH`, and makes every piece of
  evidence recorded before it stale.
- A verification command (tests, builds, linters, type checkers: see `verification_command`) run
  through `bash` records evidence `PASSED: CMD` when it exits 0, and an objection
  `FAILED: CMD (exit N)` when it does not. Only a later passing run of the same command (same
  text, same workdir) withdraws that objection.
- Other detectors raise and withdraw their own objections with `object(source, text)` and
  `resolve(source)`.
- `task_status` adds a claim; a claim never clears an objection.
- `arm()` (`/verify`) asks for an audit: all evidence becomes stale, and completion needs a fresh
  passing verification run.

The session keeps one checkpoint for its whole life, so compaction loses nothing; `summary_note()`
is the text a compaction summary carries for the model. `snapshot()` is the `Verification` event a
session records; `restore()` rebuilds the checkpoint from the last one (resume, session switch).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..events import Verification
from ..policy.wrappers import unwrap

if TYPE_CHECKING:
    from ..tools.base import ToolOutcome

MAX_CHANGED_PATHS = 200
MAX_CLAIMS = 20
MAX_EVIDENCE = 50
MAX_OBJECTIONS = 50
MAX_COMMAND_CHARS = 300
MAX_TEXT_CHARS = 1000
MAX_LINE_CHARS = 16 * 1024  # a longer bash line is never treated as a verification command
_SOURCE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_STALE = " [stale]"
_RECOVERED = " (failed before)"
_FAILED = re.compile(r"^FAILED: (?P<cmd>.+) \((?P<how>exit -?\d+|timed out|killed by signal \d+)\)$", re.DOTALL)
_EXIT = re.compile(r"\[exit code (-?\d+)\]")
_SIGNAL = re.compile(r"\[killed by signal (\d+)")

# ---------------------------------------------------------------------------------------------
# Which bash lines are verification commands

# Programs that verify whatever their arguments.
VERIFIER_PROGRAMS = frozenset({
    "pytest", "py.test", "tox", "nox", "mypy", "pyright", "flake8", "pylint", "tsc", "eslint", "jest", "vitest", "mocha",
    "phpunit", "rspec", "ctest", "shellcheck", "golangci-lint", "hadolint", "stylelint", "biome",
})
# Programs that verify with one of these subcommands (`cargo test`, `npm test`).
VERIFIER_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "cargo": frozenset({"test", "build", "check", "clippy", "nextest"}),
    "go": frozenset({"test", "vet", "build"}),
    "npm": frozenset({"test", "t", "tst"}),
    "yarn": frozenset({"test", "lint", "build", "typecheck", "check"}),
    "pnpm": frozenset({"test", "t", "lint", "build", "typecheck", "check"}),
    "bun": frozenset({"test"}),
    "deno": frozenset({"test", "lint", "check"}),
    "mvn": frozenset({"test", "verify", "package", "install"}),
    "mvnw": frozenset({"test", "verify", "package", "install"}),
    "gradle": frozenset({"test", "check", "build"}),
    "gradlew": frozenset({"test", "check", "build"}),
    "dotnet": frozenset({"test", "build"}),
    "make": frozenset({"test", "tests", "check", "lint", "build", "all", "verify", "ci", "typecheck"}),
    "gmake": frozenset({"test", "tests", "check", "lint", "build", "all", "verify", "ci", "typecheck"}),
    "ruff": frozenset({"check"}),
    "mix": frozenset({"test"}),
    "swift": frozenset({"test", "build"}),
}
# `npm run NAME` (and yarn, pnpm, bun): script names that verify (`test:unit` counts as `test`).
VERIFIER_SCRIPTS = frozenset({"test", "tests", "lint", "build", "typecheck", "type-check", "check", "verify", "ci"})
# `python -m MODULE`
VERIFIER_MODULES = frozenset({"pytest", "unittest", "mypy", "ruff", "tox", "nox", "pyright", "flake8", "pylint", "compileall"})
_SCRIPT_NAMES = re.compile(r"^(test|tests|check|lint|verify|ci|run[-_]tests?)([-_.].*)?$")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def _verifies(argv: list[str]) -> bool:
    argv = argv[unwrap(argv).start:]  # `FOO=1 uv run pytest`, `timeout 60 pytest`: pytest
    if not argv:
        return False
    program = argv[0]
    name = os.path.basename(program)
    rest = argv[1:]
    words = [w for w in rest if not w.startswith("-")]
    if name in VERIFIER_PROGRAMS:
        return True
    if name in ("ruff",):
        return bool(words) and (words[0] == "check" or (words[0] == "format" and "--check" in rest))
    if name in ("make", "gmake"):
        targets = [w for w in words if "=" not in w]
        return not targets or all(t in VERIFIER_SUBCOMMANDS["make"] for t in targets)
    if name in ("npm", "yarn", "pnpm", "bun") and words and words[0] in ("run", "run-script"):
        return len(words) > 1 and words[1].split(":", 1)[0] in VERIFIER_SCRIPTS
    if name in VERIFIER_SUBCOMMANDS:
        return bool(words) and words[0] in VERIFIER_SUBCOMMANDS[name]
    if _PYTHON.match(name):
        if len(rest) >= 2 and rest[0] == "-m":
            module = rest[1]
            if module == "ruff":
                return _verifies(["ruff", *rest[2:]])
            return module in VERIFIER_MODULES
        return False
    if name in ("bash", "sh", "zsh") and words and not any(w == "-c" for w in rest):
        script = words[0]
        return "/" in script and bool(_SCRIPT_NAMES.match(os.path.basename(script)))
    # A project script run by path: ./scripts/test, scripts/check.sh, ./run_tests.sh
    # (not a system program such as /usr/bin/test)
    system = program.startswith(("/usr/", "/bin/", "/sbin/"))
    return "/" in program and not system and bool(_SCRIPT_NAMES.match(name))


def verification_command(command: str) -> bool:
    """Whether a bash line runs a verification command whose success its exit status reports.

    The line is parsed as shell (the hardline floor's parser). Its last statement decides the exit
    status: a verifier must be among the `&&`-joined commands of that statement (a subshell or a
    `{ }` group counts as its own last statement). Lines with a pipe, `||` or `&` (background)
    anywhere are not verification runs: their exit status need not be the verifier's
    (`pytest | tail`, `make test || true`); neither is a line that does not parse."""
    if len(command) > MAX_LINE_CHARS:
        return False
    from ..policy.shell import ShellParseError, literal, parse

    try:
        parsed = parse(command)
    except ShellParseError:
        return False
    stack = [parsed.root]
    while stack:
        node = stack.pop()
        if node.type in ("pipeline", "||", "&", "|&"):
            return False
        stack.extend(node.children)
    argvs: list[list[str]] = []
    statement = _last_statement(parsed.root)
    pending = [statement] if statement is not None else []
    while pending:
        node = pending.pop(0)
        if node.type == "list":
            pending[:0] = [child for child in node.named_children if child.type != "comment"]
        elif node.type in ("subshell", "compound_statement"):
            inner = _last_statement(node)
            if inner is not None:
                pending.insert(0, inner)
        elif node.type == "redirected_statement":
            body = node.child_by_field_name("body")
            if body is not None:
                pending.insert(0, body)
        elif node.type == "command":
            words = [child.named_children[0] if child.type == "command_name" and child.named_child_count == 1 else child
                     for child in node.children
                     if child.is_named and child.type not in ("variable_assignment", "comment", "file_redirect", "heredoc_redirect",
                                                              "herestring_redirect")]
            argvs.append([literal(parsed, word) for word in words])
    return any(_verifies(argv) for argv in argvs if argv)


def _last_statement(node: Any) -> Any:
    """The last statement among a node's children (the one whose exit status is the node's)."""
    statements = [child for child in node.named_children if child.type not in ("comment", "heredoc_body")]
    return statements[-1] if statements else None


def _normalised(command: str, workdir: str) -> str:
    text = " ".join(command.split())
    if len(text) > MAX_COMMAND_CHARS:
        text = text[: MAX_COMMAND_CHARS - 3] + "..."
    return f"{text} [in {workdir}]" if workdir else text


def _cut(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# The checkpoint


@dataclass
class _Evidence:
    stale: bool = False
    recovered: bool = False  # this command failed before it passed

    def render(self, command: str) -> str:
        return f"PASSED: {command}" + (_RECOVERED if self.recovered else "") + (_STALE if self.stale else "")


class Checkpoint:
    """Claims, evidence and objections of a session; see the module docstring."""

    def __init__(self) -> None:
        self.armed = False
        self._changed: list[str] = []  # paths, oldest first, each once
        self._claims: list[str] = []
        self._evidence: dict[str, _Evidence] = {}  # by command
        # By key: ("", CMD) for a failed command, (SOURCE, TEXT) for a detector's objection.
        self._objections: dict[tuple[str, str], str] = {}
        self._since: list[str] = []  # paths changed since the last passing verification run
        self.failed_before = False  # a verification command failed at some point
        self.version = 0  # bumped by every change, so a front end knows when to record a snapshot

    # ---------------------------------------------------------------- what the loop feeds it

    def observe(self, call_name: str, arguments: Mapping[str, Any], outcome: ToolOutcome) -> None:
        """A tool call ended with this outcome (the loop calls it after every call that ran)."""
        if call_name in ("write_file", "edit_file"):
            path = arguments.get("path")
            if not outcome.is_error and isinstance(path, str) and path:
                self._change(os.path.normpath(path))
        elif call_name == "bash":
            command = arguments.get("command")
            workdir = arguments.get("workdir") or ""
            if isinstance(command, str) and isinstance(workdir, str) and verification_command(command):
                self._verified(_normalised(command, workdir), outcome)
        elif call_name == "task_status" and not outcome.is_error:
            status, summary = arguments.get("status"), arguments.get("summary")
            if isinstance(status, str) and isinstance(summary, str):
                self.claim(f"task_status {status}: {summary}")

    def _change(self, path: str) -> None:
        path = _cut(path, MAX_COMMAND_CHARS)
        if path in self._changed:
            self._changed.remove(path)
        self._changed.append(path)
        del self._changed[:-MAX_CHANGED_PATHS]
        if path not in self._since:
            self._since.append(path)
            del self._since[:-MAX_CHANGED_PATHS]
        for evidence in self._evidence.values():
            evidence.stale = True
        self.version += 1

    def _verified(self, command: str, outcome: ToolOutcome) -> None:
        key = ("", command)
        if not outcome.is_error:
            failed = self._objections.pop(key, None) is not None
            old = self._evidence.pop(command, None)
            self._evidence[command] = _Evidence(recovered=failed or (old is not None and old.recovered))
            while len(self._evidence) > MAX_EVIDENCE:
                del self._evidence[next(iter(self._evidence))]
            self._since.clear()
        elif outcome.category in ("exit_status", "timeout"):
            self.failed_before = True
            self._evidence.pop(command, None)
            self._add_objection(key, f"FAILED: {command} ({_how_it_failed(outcome)})")
        else:
            return  # not run, or the ToolService failed: no word on the command itself
        self.version += 1

    def _add_objection(self, key: tuple[str, str], text: str) -> None:
        self._objections.pop(key, None)
        self._objections[key] = text
        while len(self._objections) > MAX_OBJECTIONS:
            del self._objections[next(iter(self._objections))]

    def object(self, source: str, text: str) -> None:
        """A detector's objection to completing the task (a source may hold several; the same text
        twice is one)."""
        if not _SOURCE.match(source):
            raise ValueError(f"an objection source is 1 to 64 letters, digits, '_', '.' or '-', not {source!r}")
        text = _cut(text)
        if (source, text) in self._objections:
            return
        self._add_objection((source, text), f"{source}: {text}")
        self.version += 1

    def resolve(self, source: str) -> bool:
        """Withdraw every objection of a detector; whether there was one."""
        keys = [k for k in self._objections if k[0] == source]
        for key in keys:
            del self._objections[key]
        if keys:
            self.version += 1
        return bool(keys)

    def claim(self, text: str) -> None:
        """A completion claim (the model's `task_status`). It never clears an objection."""
        self._claims.append(f"claimed: {_cut(text)}")
        del self._claims[:-MAX_CLAIMS]
        self.version += 1

    def arm(self) -> None:
        """`/verify`: the next completion needs a passing verification run made from now on."""
        self.armed = True
        for evidence in self._evidence.values():
            evidence.stale = True
        self.version += 1

    def disarm(self) -> None:
        if self.armed:
            self.armed = False
            self.version += 1

    # ---------------------------------------------------------------- what the adjudicator reads

    @property
    def objections(self) -> list[str]:
        return list(self._objections.values())

    @property
    def evidence(self) -> list[str]:
        return [e.render(c) for c, e in self._evidence.items()]

    @property
    def claims(self) -> list[str]:
        return [f"changed {p}" for p in self._changed] + list(self._claims)

    @property
    def changed(self) -> list[str]:
        return list(self._changed)

    @property
    def unverified_changes(self) -> list[str]:
        """Paths changed since the last passing verification run (all changes if there was none)."""
        return list(self._since)

    def has_fresh_evidence(self) -> bool:
        return any(not e.stale for e in self._evidence.values())

    def stale_commands(self) -> list[str]:
        return [c for c, e in self._evidence.items() if e.stale]

    def failed_commands(self) -> list[str]:
        """Commands that failed earlier: open objections and those a later pass withdrew."""
        open_ = [command for source, command in self._objections if not source]
        return open_ + [c for c, e in self._evidence.items() if e.recovered and c not in open_]

    # ---------------------------------------------------------------- persistence

    def snapshot(self, turn: int = 0) -> Verification:
        return Verification(turn=turn, armed=self.armed, claims=self.claims, evidence=self.evidence, objections=self.objections)

    @classmethod
    def restore(cls, event: Mapping[str, Any] | Verification) -> Checkpoint:
        """The checkpoint a recorded `verification` event describes (a ValueError when it is not one)."""
        from pydantic import ValidationError

        try:
            snap = event if isinstance(event, Verification) else Verification.model_validate(dict(event))
        except ValidationError as exc:
            raise ValueError(f"not a verification event: {exc.errors()[0]['msg']}") from None
        self = cls()
        self.armed = snap.armed
        for claim in snap.claims[-(MAX_CHANGED_PATHS + MAX_CLAIMS):]:
            if claim.startswith("changed "):
                self._changed.append(claim.removeprefix("changed "))
            else:
                self._claims.append(claim)
        del self._changed[:-MAX_CHANGED_PATHS]
        del self._claims[:-MAX_CLAIMS]
        for text in snap.evidence[-MAX_EVIDENCE:]:
            if not text.startswith("PASSED: "):
                continue
            body = text.removeprefix("PASSED: ")
            stale = body.endswith(_STALE)
            body = body.removesuffix(_STALE)
            recovered = body.endswith(_RECOVERED)
            body = body.removesuffix(_RECOVERED)
            self._evidence[body] = _Evidence(stale=stale, recovered=recovered)
        for text in snap.objections[-MAX_OBJECTIONS:]:
            failed = _FAILED.match(text)
            if failed:
                self._objections[("", failed["cmd"])] = text
                continue
            source, sep, body = text.partition(": ")
            if sep and _SOURCE.match(source):
                self._objections[(source, body)] = text
        self.failed_before = bool(self.failed_commands())
        # Which changes came after the last passing run is not recorded: without fresh evidence,
        # every change counts as unverified.
        self._since = [] if self.has_fresh_evidence() else list(self._changed)
        return self

    def summary_note(self) -> str:
        """The checkpoint as text for a compaction summary (empty when there is nothing to say)."""
        if not (self._changed or self._claims or self._evidence or self._objections or self.armed):
            return ""
        lines = ["[Verification checkpoint, kept by Osprey across compaction]"]
        if self.armed:
            lines.append("A verification audit was requested (/verify): run the project's checks before finishing.")
        if self._changed:
            shown = self._changed[-20:]
            more = len(self._changed) - len(shown)
            lines.append("Files changed: " + ", ".join(shown) + (f" (and {more} earlier)" if more else ""))
        if self._since and self._evidence:
            lines.append("Changed since the last passing verification run: " + ", ".join(self._since[-20:]))
        for text in self.evidence:
            lines.append(f"Evidence: {text}")
        for text in self.objections:
            lines.append(f"Open objection: {text}")
        return "\n".join(lines)


def _how_it_failed(outcome: ToolOutcome) -> str:
    tail = outcome.text[-400:]
    if outcome.category == "timeout":
        return "timed out"
    signal = _SIGNAL.search(tail)
    if signal:
        return f"killed by signal {signal.group(1)}"
    found = _EXIT.findall(tail)
    if found:
        return f"exit {found[-1]}"
    return "exit -1"  # an exit_status failure whose status line an interceptor replaced


VERIFY_AUDIT_PROMPT = (
    "Audit the current task (the person asked for verification with /verify): run the project's tests, builds, "
    "linters or type checkers that cover what was changed, fix what fails, and report what you ran and its result."
)
