"""Stall detectors: the loop's watch for a model going round in circles.

Four detectors plug into the interception points (`Interceptor`); each tells the model what it saw
(an *advisory*), emits an `Advisory` event with that exact text, and two of them also raise a
completion objection that the verification checkpoint holds against finishing the task.

- **doom_loop**: the same tool with the same arguments (canonical JSON, hashed) `doom_loop_repeats`
  (3) calls in a row. That call, and every further identical call in the row, is not dispatched:
  `before_call` denies it (category `doom_loop`) and its result tells the model to change approach.
  A polling tool (`wait_agent`: its answer changes with time) is never counted.
- **identical_failure**: failed calls with the same tool and arguments are counted whatever calls
  come between them; at `identical_failure_threshold` (2) failures and beyond, a retry-suppressor
  notice is prepended to the failed call's result. A successful matching call resets the count.
- **no_progress** (process failure families): every finished *process call* is an observation: a
  call of a tool in `process_tools` (`bash`), or any failed call whose category is `exit_status` (a
  custom tool's program that exited non-zero or was killed). A failed observation is classified
  into a family (`failure_family`); when `no_progress_matches` (3) observations of one family are
  among the last `no_progress_window` (10), the advisory is prepended to that result and an
  objection is raised. A later successful process call with the same command (`Family.command`)
  withdraws the objection for that family.
- **artifact_stasis**: `artifact_stasis_turns` (10) model turns in a row that made tool calls but
  changed nothing in the workspace (see `changes_artifacts`) raise an objection; the advisory is
  prepended to the next result the model gets (or to the doom-loop denial, if that comes first). A
  successful change withdraws the objection and restarts the count.

An equivalent advisory (same detector, same subject: the call's tool and arguments, the failure
family, or the workspace) is not given again (no event, no text) for `suppress_turns` (30) turns;
the doom-loop denial itself still happens, since it is what keeps the call from running.

A new task (`prompt_submitted`, or `reset()`) forgets everything and withdraws open objections.
State stays small: arguments are kept as hashes (the last call's, when few, short and scalar, as
they are: `call_key`), the observation window is bounded, failure counts keep the most recent
`MAX_TRACKED` subjects, suppression entries expire.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import lazy
from ..events import Advisory, Event
from ..interception import Interceptor, Order, PendingCall, PromptSubmission, PromptVerdict, Verdict
from ..policy.wrappers import unwrap

if TYPE_CHECKING:
    from ..tools.base import ToolOutcome

Detector = Literal["doom_loop", "identical_failure", "no_progress", "artifact_stasis"]

MAX_TRACKED = 512  # failing (tool, arguments) subjects whose counts are kept
MAX_OPEN_FAMILIES = 32  # no-progress objections open at once (the oldest is dropped past it)
MAX_SCAN_CHARS = 64 * 1024  # of a result, read to find its error line
MAX_SCAN_LINES = 2_000
MAX_LINE_CHARS = 500
MAX_SIGNATURE_CHARS = 160
MAX_COMMAND_CHARS = 16 * 1024  # of a bash command line, parsed to find its program
# Argument values whose typed tuple is equal exactly where their canonical JSON is (a float is not:
# -0.0 == 0.0, nan != nan), and the most characters of text kept in such a tuple.
_KEYED = (str, int, bool, type(None))
MAX_KEYED_CHARS = 1024


class StallSettings(BaseModel):
    """The detectors' thresholds (the spec's headless defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when the detectors start

    doom_loop_repeats: int = Field(3, ge=2)
    identical_failure_threshold: int = Field(2, ge=1)
    no_progress_matches: int = Field(3, ge=2)
    no_progress_window: int = Field(10, ge=2)
    artifact_stasis_turns: int = Field(10, ge=1)
    suppress_turns: int = Field(30, ge=0)
    # Tools whose every call runs a process (observations of the no-progress detector).
    process_tools: frozenset[str] = frozenset({"bash"})
    # Tools whose same call rightly repeats, since its answer changes with time (a child agent
    # polled until it ends): never a doom loop.
    polling_tools: frozenset[str] = frozenset({"wait_agent"})
    # Tools whose successful call changes the workspace.
    artifact_tools: frozenset[str] = frozenset({"write_file", "edit_file"})
    # Whether artifact stasis also objects to completing the task. Off by default: a task may
    # rightly change nothing (a review, an explanation, a search), and an objection only a change
    # could clear would hold such a task back until its turn limit. The advisory is given either way.
    stasis_objection: bool = False


# ------------------------------------------------------------------ failure families


@dataclass(frozen=True)
class Family:
    """What a failed process call was, folded so that retries of one failure look the same.

    `tool`: the tool's name; `command`: for bash, the program that mattered and its subcommand
    (`git commit`, `python3 -m pytest`, `npm test`; setup such as `cd`/`export`/`echo`, wrappers
    such as `sudo`/`env`/`timeout` and later pipeline stages such as `| tail` are skipped; the last
    remaining command of the line is taken), for another tool its name; `status`: `exit N`,
    `signal N`, `timeout` or the error category; `signature`: the result's first error line with
    digits, paths and hex ids folded (see `normalise`)."""

    tool: str
    command: str
    status: str
    signature: str

    @property
    def key(self) -> str:
        return f"{self.tool}\x1f{self.command}\x1f{self.status}\x1f{self.signature}"

    def describe(self) -> str:
        what = f"`{self.command}`" if self.tool == "bash" else f"{self.tool} (`{self.command}`)" if self.command != self.tool else self.tool
        return f"{what}, {self.status}" + (f": {self.signature}" if self.signature else "")


_HEX = lazy.Pattern(r"\b(?:0x[0-9a-fA-F]+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,})\b")
_PATH = lazy.Pattern(r"(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:[\w.@+~-]*/)+[\w.@+~-]*")
_DIGITS = lazy.Pattern(r"\d+")
_SPACE = lazy.Pattern(r"\s+")
_EXCEPTION_LINE = lazy.Pattern(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b")
_ERROR_WORDS = lazy.Pattern(
    r"(?i)\b(?:error|errors|exception|fatal|failed|failure|failures|traceback|panic(?:ked)?|cannot|can't|could not|not found|"
    r"no such|denied|refused|undefined|unexpected|invalid|segmentation fault|abort(?:ed)?)\b"
)
_TRACEBACK_HEADER = lazy.Pattern(r"^Traceback \(most recent call last\):?$")
_STATUS_EXIT = lazy.Pattern(r"exit(?:ed with)? code (-?\d+)")
_STATUS_SIGNAL = lazy.Pattern(r"killed by signal (\d+)")
_DROPPED = lazy.Pattern(r"^\[\.\.\. \d+ characters dropped")


def normalise(line: str) -> str:
    """A line with paths (words with a `/`) as `<path>`, hex ids (`0x..`, uuids, hashes of 7+ hex
    digits) as `<hex>`, other digit runs as `N`, runs of white space as one space; at most
    MAX_SIGNATURE_CHARS characters."""
    text = _PATH.sub("<path>", line[:MAX_LINE_CHARS])
    text = _HEX.sub("<hex>", text)
    text = _DIGITS.sub("N", text)
    return _SPACE.sub(" ", text).strip()[:MAX_SIGNATURE_CHARS]


def error_line(text: str) -> str:
    """The line of a result that says what went wrong: a Python-style exception line at the start
    of a line (`ModuleNotFoundError: ...`) if there is one, else the first line with an error word
    (a traceback header is not one), else the last non-empty line. The trailing status line the
    tool adds (`[exit code 1]`) and truncation markers are left out."""
    lines = text[:MAX_SCAN_CHARS].splitlines()[:MAX_SCAN_LINES]
    while lines and (not lines[-1].strip() or _is_status_line(lines[-1])):
        lines.pop()
    lines = [line[:MAX_LINE_CHARS] for line in lines if line.strip() and not _DROPPED.match(line)]
    for line in lines:
        if _EXCEPTION_LINE.match(line):
            return line
    for line in lines:
        if _ERROR_WORDS.search(line) and not _TRACEBACK_HEADER.match(line.strip()):
            return line
    return lines[-1] if lines else ""


def _is_status_line(line: str) -> bool:
    line = line.strip()
    return line.startswith("[") and line.endswith("]") and bool(
        _STATUS_EXIT.search(line) or _STATUS_SIGNAL.search(line) or "timed out" in line or "was killed by signal" in line
    )


def _status(text: str, category: str | None) -> str:
    if category == "timeout":
        return "timeout"
    tail = text[-600:].splitlines()[-3:]
    for line in reversed(tail):
        if not _is_status_line(line):
            continue
        if "timed out" in line:
            return "timeout"
        if m := _STATUS_SIGNAL.search(line):
            return f"signal {m.group(1)}"
        if m := _STATUS_EXIT.search(line):
            return f"exit {m.group(1)}"
    return category or "failed"


def is_process_call(name: str, category: str | None, settings: StallSettings) -> bool:
    return name in settings.process_tools or category == "exit_status"


def failure_family(name: str, arguments: Mapping[str, Any], outcome: ToolOutcome, settings: StallSettings | None = None) -> Family | None:
    """The family of a failed process call; None for a success or a call that ran no process."""
    settings = settings or StallSettings()
    if not outcome.is_error or not is_process_call(name, outcome.category, settings):
        return None
    return Family(name, command_of(name, arguments), _status(outcome.text, outcome.category), normalise(error_line(outcome.text)))


def command_of(name: str, arguments: Mapping[str, Any]) -> str:
    """What a process call ran, as a family names it: for bash, `program_key` of its command line;
    for any other tool, its name."""
    command = arguments.get("command") if name == "bash" else None
    if isinstance(command, str):
        return program_key(command) or name
    return name


# Commands that set up or report rather than do the work (skipped when choosing the program).
_SETUP = frozenset({
    "cd", "pushd", "popd", "export", "set", "unset", "source", ".", "true", ":", "echo", "printf", "sleep", "clear",
    "ulimit", "umask", "alias", "shopt", "local", "declare", "wait", "exit", "trap", "hash", "type", "which",
})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
_INTERPRETERS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "python", "python2", "python3", "node", "ruby", "perl", "php", "deno", "bun"})
_WORD = lazy.Pattern(r"[A-Za-z][A-Za-z0-9_:.-]*")
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})


def program_key(command: str, depth: int = 0) -> str:
    """The program of a bash command line that a failure is about, with its subcommand.

    The line is parsed (tree-sitter-bash, as the approval rules do); of the commands it runs at the
    first stage of their pipelines, outside `$(...)`, setup commands are skipped and the last
    remaining one is taken (`cd x && npm ci && npm test | tail` -> `npm test`; a line of setup
    commands only gives its last). Assignments and
    wrappers are removed (`FOO=1 sudo timeout 30 make check` -> `make check`), `bash -c '...'` is
    read inside. The subcommand is the word right after the program when it is a plain word (no
    `/`, no leading `-`): `git -C x status` -> `git`. `python -m mod` keeps its module; an
    interpreter running a script keeps the script's file name (`python3 tools/gen.py` ->
    `python3 gen.py`). An unparsable line falls back to splitting its first line on white space."""
    candidates = _argvs(command[:MAX_COMMAND_CHARS])
    chosen: list[str] = []
    for argv in candidates:
        argv = _unwrap(argv)
        if argv and posixpath.basename(argv[0]) not in _SETUP:
            chosen = argv
    if not chosen:  # only setup commands: the last of them
        chosen = next((a for a in (_unwrap(c) for c in reversed(candidates)) if a), [])
    if not chosen:
        return ""
    program = posixpath.basename(chosen[0])[:60]
    rest = chosen[1:]
    if program in _SHELLS and depth < 2 and "-c" in rest[:3]:
        inner = rest[rest.index("-c") + 1:]
        if inner:
            return program_key(inner[0], depth + 1) or program
    if program.startswith("python") and len(rest) >= 2 and rest[0] == "-m":
        return f"{program} -m {rest[1][:60]}"
    if program in _INTERPRETERS or program.startswith("python"):
        script = next((a for a in rest if not a.startswith("-")), "")
        if script and rest.index(script) == 0 and ("." in script or "/" in script):
            return f"{program} {posixpath.basename(script)[:60]}"
    if rest and _WORD.fullmatch(rest[0]) and "." not in rest[0]:
        return f"{program} {rest[0][:40]}"
    return program


def _argvs(command: str) -> list[list[str]]:
    """The argv of each command the line runs at the first stage of a pipeline, outside
    substitutions, in source order."""
    from ..policy.shell import ShellParseError, literal, parse

    try:
        parsed = parse(command)
    except (ShellParseError, RecursionError, ValueError):
        return [_split_plainly(command)]
    out: list[list[str]] = []
    for cmd in parsed.commands:
        if cmd.kind != "command" or not cmd.words:
            continue
        if cmd.pipes and cmd.pipes[-1][1] > 0:
            continue
        if _inside_substitution(cmd.node):
            continue
        out.append([literal(parsed, w) for w in cmd.words[:12]])
    return out


def _inside_substitution(node: Any) -> bool:
    parent = node.parent
    for _ in range(256):
        if parent is None:
            return False
        if parent.type in _SUBSTITUTIONS:
            return True
        parent = parent.parent
    return True


def _split_plainly(command: str) -> list[str]:
    first = command.strip().split("\n", 1)[0] if command.strip() else ""
    words: list[str] = []
    for word in first.split()[:12]:
        if word in ("&&", "||", ";", "|", "&"):
            break
        words.append(word.strip("'\""))
    return words


def _unwrap(argv: list[str]) -> list[str]:
    """argv without leading assignments and wrapper commands with their options (`wrappers.unwrap`)."""
    return argv[unwrap(argv).start:]


# ------------------------------------------------------------------ artifact changes

_WRITE_OPERATORS = frozenset({">", ">>", "&>", "&>>", ">|", ">&"})
_CHANGING_PROGRAMS = frozenset({
    "tee", "cp", "mv", "rm", "rmdir", "mkdir", "touch", "ln", "chmod", "chown", "install", "truncate", "patch", "unzip",
    "rsync", "dd", "shred", "gofmt", "rustfmt", "black", "isort", "prettier", "autopep8",
})
_CHANGING_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "git": frozenset({"apply", "am", "commit", "checkout", "switch", "restore", "reset", "merge", "rebase", "cherry-pick", "revert",
                      "mv", "rm", "add", "stash", "pull", "init", "clone"}),
    "npm": frozenset({"install", "i", "ci", "uninstall", "init"}),
    "pnpm": frozenset({"install", "add", "remove"}),
    "yarn": frozenset({"install", "add", "remove"}),
    "pip": frozenset({"install", "uninstall"}),
    "pip3": frozenset({"install", "uninstall"}),
    "uv": frozenset({"add", "remove", "sync", "lock", "init", "pip"}),
    "poetry": frozenset({"add", "remove", "install", "lock", "init", "new"}),
    "cargo": frozenset({"add", "remove", "new", "init", "fmt", "fix"}),
    "go": frozenset({"get", "mod", "fmt", "generate"}),
    "ruff": frozenset({"format"}),
    "tar": frozenset(),  # with an x/extract option: see below
}
_WRITE_CALL = lazy.Pattern(r"""\.write_text\(|\.write_bytes\(|\bopen\([^)]*,\s*['"][wax]|\bwriteFileSync\(|\bfs\.writeFile\(""")


def changes_artifacts(name: str, arguments: Mapping[str, Any], outcome: ToolOutcome, settings: StallSettings | None = None) -> bool:
    """Whether a call changed the workspace, by a heuristic (no diff is taken): a successful call of
    an `artifact_tools` tool (write_file, edit_file), or a successful bash call whose line writes
    files: an output redirection to anything but /dev/null or a descriptor, a file-changing program
    (`cp`, `mv`, `rm`, `mkdir`, `touch`, `tee`, `patch`, formatters, ...), `sed -i`/`perl -i`,
    `tar x`, a changing subcommand of git or a package manager (`git commit`, `npm install`,
    `cargo fmt`, `ruff format`, `ruff check --fix`, ...), or a script on the line that writes a
    file (`open(..., 'w')`, `.write_text(`). Builds and test runs (`make`, `pytest`) do not count."""
    settings = settings or StallSettings()
    if outcome.is_error:
        return False
    if name in settings.artifact_tools:
        return True
    if name != "bash":
        return False
    command = arguments.get("command")
    if not isinstance(command, str):
        return False
    return _bash_writes(command[:MAX_COMMAND_CHARS])


def _bash_writes(command: str) -> bool:
    if _WRITE_CALL.search(command):
        return True
    from ..policy.shell import ShellParseError, literal, parse

    try:
        parsed = parse(command)
    except (ShellParseError, RecursionError, ValueError):
        return bool(re.search(r"(?<![<>&\d-])>{1,2}\s*(?!&|/dev/null\b)[^\s&|;>]", command)) or any(
            _argv_writes(_split_plainly(part)) for part in re.split(r"&&|\|\||;|\n", command)[:64]
        )
    for cmd in parsed.commands:
        if cmd.kind == "redirect":
            children = cmd.node.children
            operator = next((parsed.text(c) for c in children if not c.is_named), "")
            target = parsed.text(children[-1]) if children else ""
            if operator in _WRITE_OPERATORS and target != "/dev/null" and not target.isdigit() and target != "-":
                return True
        elif cmd.kind == "command" and _argv_writes(_unwrap([literal(parsed, w) for w in cmd.words[:24]])):
            return True
    return False


def _argv_writes(argv: list[str]) -> bool:
    if not argv:
        return False
    program = posixpath.basename(argv[0])
    rest = argv[1:]
    if program in _CHANGING_PROGRAMS:
        return True
    if program == "sed" and any(a.startswith("--in-place") or (a.startswith("-") and not a.startswith("--") and "i" in a[1:]) for a in rest):
        return True
    if program == "perl" and any(a.startswith("-") and not a.startswith("--") and "i" in a[1:] for a in rest):
        return True
    if program == "tar" and rest and ("x" in rest[0].lstrip("-") or "--extract" in rest or "-x" in rest):
        return True
    if program == "ruff" and rest[:1] == ["check"] and "--fix" in rest:
        return True
    subcommands = _CHANGING_SUBCOMMANDS.get(program)
    if subcommands:
        sub = next((a for a in rest if not a.startswith("-")), "")
        return sub in subcommands
    return False


# ------------------------------------------------------------------ the detectors


def arguments_hash(name: str, arguments: Mapping[str, Any]) -> str:
    """A call's identity: its tool and the canonical JSON of its arguments, hashed."""
    return hashlib.sha256(f"{name}\x00{_canonical(arguments)}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _canonical(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def call_key(name: str, arguments: Mapping[str, Any]) -> str | tuple[Any, ...]:
    """What tells repeated calls apart, equal exactly where `arguments_hash` is: for a few short
    string, integer, boolean or null arguments, the tool and the arguments with their types, sorted
    by name (no JSON, no hash); for any other, the hash."""
    size = 0
    for key, value in arguments.items():
        if type(key) is not str:  # (not from JSON) the arguments as their JSON reads back, which keys the same
            return call_key(name, json.loads(_canonical(arguments)))
        kind = type(value)
        if kind not in _KEYED:
            return arguments_hash(name, arguments)
        if kind is str:
            size += len(value)
    if size > MAX_KEYED_CHARS or len(arguments) > 16:
        return arguments_hash(name, arguments)
    return (name, *sorted((key, type(value), value) for key, value in arguments.items()))


def doom_loop_text(name: str, repeats: int) -> str:
    return (f"This call was not run: it is the same {name} call, with the same arguments, {repeats} times in a row, and it "
            "would give the same result again. Change your approach: use what the earlier results already told you, "
            "change the arguments, use a different tool, or give your answer.")


def identical_failure_text(name: str, failures: int) -> str:
    return (f"[retry suppressor] This {name} call has now failed {failures} times with exactly these arguments (other calls "
            "in between do not reset the count). Do not run it again unchanged: read the error below, fix its cause or "
            "change the arguments, or try another way.")


def no_progress_text(family: Family, matches: int, window: int) -> str:
    return (f"[no progress] {matches} of your last {window} process runs failed the same way: {family.describe()}. "
            "Retrying variations of it is not getting anywhere. Stop and find the cause (read the code, configuration or "
            "logs the error points to), then change the approach. Until a run of "
            f"`{family.command}` succeeds, this is an open objection to finishing the task.")


def no_progress_objection(family: Family, matches: int, window: int) -> str:
    return f"{matches} of the last {window} process runs failed the same way ({family.describe()}); no run of `{family.command}` has succeeded since."


def artifact_stasis_text(turns: int) -> str:
    return (f"[no progress] {turns} turns in a row used tools without changing any file in the workspace. If the task "
            "needs changes, make them now; if something blocks you, say what it is. Until a file changes, this is an open "
            "objection to finishing the task.")


def artifact_stasis_objection(turns: int) -> str:
    return f"{turns} turns in a row used tools without changing any file in the workspace."


@dataclass
class _Pending:
    """A turn-level advisory waiting for the next result the model gets."""

    detector: Detector
    text: str


class StallDetectors(Interceptor):
    """The stall detectors of one session (see the module's docstring).

    `emit` gets the `Advisory` events; `object(detector, text)` raises a completion objection;
    `resolve(detector)` withdraws every objection of that detector."""

    name = "stall_detectors"
    order = Order.STALLS
    model_only = True  # they judge the model's conduct, not the person's own calls

    def __init__(self, emit: Callable[[Event], None], object: Callable[[str, str], None], resolve: Callable[[str], object],
                 settings: StallSettings | None = None) -> None:
        self.emit = emit
        self.object = object
        self.resolve = resolve
        self.settings = settings or StallSettings()
        self._turn = 0
        self._last_call: str | tuple[Any, ...] | None = None  # the last call's `call_key`
        self._streak = 0
        self._failures: OrderedDict[str, int] = OrderedDict()
        self._window: deque[str | None] = deque(maxlen=self.settings.no_progress_window)
        self._families: OrderedDict[str, tuple[Family, int]] = OrderedDict()  # open no-progress objections: family, matches
        self._stasis_turns = 0
        self._stasis_open = False
        self._batch_changed = False
        self._given: dict[tuple[str, str], int] = {}  # (detector, subject) -> turn an advisory was given
        self._pending: list[_Pending] = []

    # -------------------------------------------------------------- state

    def reset(self) -> None:
        """Forget everything for a new task; withdraw the objections still open."""
        open_detectors = [d for d, is_open in (("no_progress", bool(self._families)), ("artifact_stasis", self._stasis_open)) if is_open]
        self._turn = 0
        self._last_call = None
        self._streak = 0
        self._failures.clear()
        self._window.clear()
        self._families.clear()
        self._stasis_turns = 0
        self._stasis_open = False
        self._batch_changed = False
        self._given.clear()
        self._pending.clear()
        for detector in open_detectors:
            self.resolve(detector)

    def _may_advise(self, detector: Detector, subject: str, turn: int) -> bool:
        """Whether an advisory may be given now (not suppressed); if so, it counts as given."""
        last = self._given.get((detector, subject))
        if last is not None and turn - last < self.settings.suppress_turns:
            return False
        self._given[(detector, subject)] = turn
        return True

    def _advise(self, detector: Detector, text: str, turn: int, call_id: str | None) -> str:
        self.emit(Advisory(turn=turn, detector=detector, message=text, call_id=call_id))
        return text

    def _deliver_pending(self, turn: int, call_id: str) -> list[str]:
        delivered = [self._advise(p.detector, p.text, turn, call_id) for p in self._pending]
        self._pending.clear()
        return delivered

    # -------------------------------------------------------------- interception points

    async def prompt_submitted(self, prompt: PromptSubmission) -> PromptVerdict | None:
        self.reset()
        return None

    def begin_batch(self, turn: int) -> None:
        self._turn = turn
        self._batch_changed = False
        horizon = turn - self.settings.suppress_turns
        if len(self._given) > 64:
            self._given = {k: t for k, t in self._given.items() if t > horizon}

    def end_batch(self, turn: int) -> None:
        s = self.settings
        if self._batch_changed:
            self._stasis_turns = 0
            self._pending = [p for p in self._pending if p.detector != "artifact_stasis"]
            if self._stasis_open:
                self._stasis_open = False
                self.resolve("artifact_stasis")
            return
        self._stasis_turns += 1
        if self._stasis_turns < s.artifact_stasis_turns:
            return
        if not self._stasis_open:
            self._stasis_open = True
            if s.stasis_objection:
                self.object("artifact_stasis", artifact_stasis_objection(self._stasis_turns))
        if self._may_advise("artifact_stasis", "workspace", turn):
            self._pending = [p for p in self._pending if p.detector != "artifact_stasis"]
            self._pending.append(_Pending("artifact_stasis", artifact_stasis_text(self._stasis_turns)))

    async def before_call(self, call: PendingCall) -> Verdict | None:
        self._turn = max(self._turn, call.turn)
        if call.name in self.settings.polling_tools:
            self._streak, self._last_call = 0, None
            return None
        key = call_key(call.name, call.arguments)
        self._streak = self._streak + 1 if key == self._last_call else 1
        self._last_call = key
        if self._streak < self.settings.doom_loop_repeats:
            return None
        text = doom_loop_text(call.name, self._streak)
        parts = [text]
        if self._may_advise("doom_loop", arguments_hash(call.name, call.arguments), call.turn):
            self._advise("doom_loop", text, call.turn, call.id)
        parts += self._deliver_pending(call.turn, call.id)
        return Verdict.deny(self.name, "\n\n".join(parts), category="doom_loop")

    async def after_call(self, call: PendingCall, outcome: ToolOutcome) -> ToolOutcome | None:
        s = self.settings
        turn = max(self._turn, call.turn)
        notices: list[str] = []
        if changes_artifacts(call.name, call.arguments, outcome, s):
            self._batch_changed = True
        # identical failure (the identity is worked out only when a count is kept or may be reset)
        if outcome.is_error:
            identity = arguments_hash(call.name, call.arguments)
            failures = self._failures.pop(identity, 0) + 1
            self._failures[identity] = failures
            while len(self._failures) > MAX_TRACKED:
                self._failures.popitem(last=False)
            if failures >= s.identical_failure_threshold and self._may_advise("identical_failure", identity, turn):
                notices.append(self._advise("identical_failure", identical_failure_text(call.name, failures), turn, call.id))
        elif self._failures:
            self._failures.pop(arguments_hash(call.name, call.arguments), None)
        # process failure families
        if is_process_call(call.name, outcome.category, s):
            family = failure_family(call.name, call.arguments, outcome, s)
            if family is None:
                self._window.append(None)
                self._withdraw_families(command_of(call.name, call.arguments))
            else:
                self._window.append(family.key)
                matches = sum(1 for k in self._window if k == family.key)
                if matches >= s.no_progress_matches:
                    if family.key not in self._families:
                        self._families[family.key] = (family, matches)
                        while len(self._families) > MAX_OPEN_FAMILIES:
                            self._families.popitem(last=False)
                        self.object("no_progress", no_progress_objection(family, matches, len(self._window)))
                    if self._may_advise("no_progress", family.key, turn):
                        notices.append(self._advise("no_progress", no_progress_text(family, matches, len(self._window)), turn, call.id))
        notices = self._deliver_pending(turn, call.id) + notices
        if not notices:
            return None
        return replace(outcome, text="\n\n".join([*notices, outcome.text]))

    def _withdraw_families(self, command: str) -> None:
        """A process call of `command` succeeded: its families' objections are withdrawn (the
        others are raised again, since withdrawing is by detector)."""
        done = [k for k, (f, _) in self._families.items() if f.command == command]
        if not done:
            return
        for key in done:
            del self._families[key]
        self.resolve("no_progress")
        for family, matches in self._families.values():
            self.object("no_progress", no_progress_objection(family, matches, self.settings.no_progress_window))
