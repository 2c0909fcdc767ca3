"""Lifecycle hooks (`hooks.toml`): commands run at session events, whose verdicts plug into the
session core's interception points.

A hooks file holds `[[hooks.<Event>]]` groups: an optional `matcher`, a `dialect` ("osprey", the
default, or "claude") and `[[hooks.<Event>.hooks]]` entries `{command, timeout_secs}`. Each command
runs through `sh -c` in the agent's working directory, in its own process group, with the event as
one JSON line on standard input. Its exit status and output are its verdict:

- exit 0: standard output that starts with `{` is a JSON verdict (malformed: a warning, allowed);
  anything else is no decision (a claude-dialect UserPromptSubmit hook's plain output is context);
- exit 2: blocks, with standard error as the reason (empty standard error: a warning, allowed);
- any other exit, a spawn failure, a timeout: a warning, and the action is allowed.

The user's own hooks file and a trusted project's run together (`HookSet`s, the user's first).
The hooks matching one event run in parallel; deny beats ask beats allow beats no decision, and
the first hook (the user's file first, then file order) that replaces a tool's input or result
wins. A hook whose file is trusted through a pin runs only after the files its command names were
checked against the pin, from private copies of the checked bytes (`pins.prepare_hook`); when
they differ it does not run, and a PreToolUse call is denied. The `claude` dialect
speaks Claude Code's vocabulary (tool names, `file_path`, `transcript_path`, ...) so that hook
scripts written for it run unchanged. `docs/hooks.md` is the user's description of all this.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tomli
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .. import tomlfile
from ..errors import ConfigError
from ..hostrun import StartFailed, run_program
from ..interception import (
    CompletionCandidate,
    Continuation,
    Interceptor,
    Order,
    PendingCall,
    PromptSubmission,
    PromptVerdict,
    Verdict,
)
from .guard import changes_user_hooks
from .pins import Pin, PinMismatch, prepare_hook

if TYPE_CHECKING:
    from ..events import Event, SessionEnd, SessionStart
    from ..messages import Message
    from ..tools.base import ToolOutcome

EventName = Literal["PreToolUse", "PostToolUse", "Stop", "SessionStart", "SessionEnd", "UserPromptSubmit", "PreCompact"]
EVENTS: tuple[EventName, ...] = ("PreToolUse", "PostToolUse", "Stop", "SessionStart", "SessionEnd", "UserPromptSubmit", "PreCompact")
Dialect = Literal["osprey", "claude"]

MAX_FILE_BYTES = 64 * 1024
MAX_GROUPS_PER_EVENT = 32
MAX_HOOKS_PER_GROUP = 16
MAX_HOOKS = 128
MAX_COMMAND_CHARS = 4096
MAX_MATCHER_CHARS = 512
DEFAULT_TIMEOUT_SECS = 600
MAX_TIMEOUT_SECS = 3600
# Of each of a hook's output streams, this much is kept; the rest is read and dropped.
OUTPUT_KEEP_BYTES = 64 * 1024
# Text a verdict gives (a reason, context, a replacement result) is cut to this many characters.
MAX_VERDICT_TEXT = 16 * 1024
# Stop hooks may continue one task this many times; then the task ends, with a warning.
STOP_CONTINUATION_CAP = 5
# After SIGTERM, a timed-out hook's process group gets this long before SIGKILL.
TERM_GRACE_SECS = 2.0
# The claude dialect's transcript file keeps the newest messages that fit in this many bytes.
TRANSCRIPT_MAX_BYTES = 4 * 1024 * 1024
TRANSCRIPT_TEXT_CHARS = 64 * 1024

# Osprey's tool names as Claude Code calls its own tools; other names stay as they are.
CLAUDE_TOOL_NAMES = {
    "bash": "Bash", "read_file": "Read", "write_file": "Write", "edit_file": "Edit", "find_files": "Glob",
    "grep": "Grep", "list_directory": "LS", "web_fetch": "WebFetch", "web_search": "WebSearch",
}
# Per tool: (Osprey's input field, Claude's, whether the value is a path made absolute). Fields
# not listed keep their names both ways.
_FIELDS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "read_file": (("path", "file_path", True),),
    "write_file": (("path", "file_path", True),),
    "edit_file": (("path", "file_path", True),),
    "bash": (("timeout_ms", "timeout", False),),
    "find_files": (("path", "path", True),),
    "grep": (("path", "path", True), ("ignore_case", "-i", False), ("max_matches", "head_limit", False)),
    "list_directory": (("path", "path", True),),
}
_CLAUDE_EXACT = re.compile(r"[A-Za-z0-9_|]+")


class HooksError(ConfigError):
    """A hooks file that cannot be used; the message is a short, sanitized reason."""


def _shown(text: str, limit: int = 200) -> str:
    """Text for a notice or an error message: control characters escaped, cut to `limit`."""
    out = "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _cut(text: str, limit: int = MAX_VERDICT_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[… {len(text) - limit} characters cut]"


# ------------------------------------------------------------------ the file


class HookEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    command: str = Field(min_length=1, max_length=MAX_COMMAND_CHARS)
    timeout_secs: int = Field(DEFAULT_TIMEOUT_SECS, ge=1, le=MAX_TIMEOUT_SECS)

    @field_validator("command")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value or not value.strip():
            raise ValueError("a command must be non-empty text without NUL characters")
        return value


class HookGroup(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    matcher: str | None = Field(None, max_length=MAX_MATCHER_CHARS)
    dialect: Dialect = "osprey"
    hooks: list[HookEntry] = Field(min_length=1, max_length=MAX_HOOKS_PER_GROUP)
    # None: every name; a set: exactly these names; a pattern: fullmatch (osprey) or search (claude).
    _names: frozenset[str] | None = PrivateAttr(None)
    _pattern: re.Pattern[str] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _compile(self) -> HookGroup:
        matcher = self.matcher
        if matcher is None or matcher == "" or (self.dialect == "claude" and matcher == "*"):
            return self
        if self.dialect == "claude" and _CLAUDE_EXACT.fullmatch(matcher):
            self._names = frozenset(name for name in matcher.split("|") if name)
            return self
        try:
            self._pattern = re.compile(matcher)
        except re.error as exc:
            raise ValueError(f"the matcher {_shown(matcher, 80)!r} is not a valid regular expression: {exc}") from None
        return self

    def matches(self, name: str) -> bool:
        """Whether this group runs for `name` (a tool name in the group's dialect, or an event's
        subject such as PreCompact's trigger)."""
        if self._names is not None:
            return name in self._names
        if self._pattern is None:
            return True
        if self.dialect == "claude":
            return self._pattern.search(name) is not None
        return self._pattern.fullmatch(name) is not None


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    PreToolUse: list[HookGroup] = Field(default_factory=list, max_length=MAX_GROUPS_PER_EVENT)
    PostToolUse: list[HookGroup] = Field(default_factory=list, max_length=MAX_GROUPS_PER_EVENT)
    Stop: list[HookGroup] = Field(default_factory=list, max_length=MAX_GROUPS_PER_EVENT)
    SessionStart: list[HookGroup] = Field(default_factory=list, max_length=MAX_GROUPS_PER_EVENT)
    SessionEnd: list[HookGroup] = Field(default_factory=list, max_length=MAX_GROUPS_PER_EVENT)
    UserPromptSubmit: list[HookGroup] = Field(default_factory=list, max_length=MAX_GROUPS_PER_EVENT)
    PreCompact: list[HookGroup] = Field(default_factory=list, max_length=MAX_GROUPS_PER_EVENT)


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    hooks: _Table = Field(default_factory=_Table)


@dataclass(frozen=True)
class HooksFile:
    """A parsed hooks file: its groups per event, in file order."""

    source: str
    events: Mapping[str, tuple[HookGroup, ...]]

    def groups(self, event: str) -> tuple[HookGroup, ...]:
        return self.events.get(event, ())


def parse_hooks(data: bytes, *, source: str) -> HooksFile:
    """Parse and validate a hooks file's bytes; raises HooksError with a short reason. An invalid
    regular expression anywhere makes the whole file invalid."""
    if len(data) > MAX_FILE_BYTES:
        raise HooksError(f"{source}: the file is {len(data)} bytes; a hooks file holds at most {MAX_FILE_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HooksError(f"{source}: the file is not UTF-8 text") from None
    try:
        raw = tomlfile.loads(text)
    except tomli.TOMLDecodeError as exc:
        raise HooksError(f"{source}: not valid TOML: {_shown(str(exc))}") from None
    try:
        document = _Document.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise HooksError(f"{source}: {_shown(where, 80)}: {_shown(message)}") from None
    events = {name: tuple(getattr(document.hooks, name)) for name in EVENTS}
    total = sum(len(group.hooks) for groups in events.values() for group in groups)
    if total > MAX_HOOKS:
        raise HooksError(f"{source}: the file defines {total} hooks; at most {MAX_HOOKS} are allowed")
    return HooksFile(source=source, events={name: groups for name, groups in events.items() if groups})


@dataclass(frozen=True)
class HookSet:
    """One active hooks file: its groups, where it is, and, when its trust is a pin, what the pin
    covers of each command (the identities of the files it names, and where they are judged),
    checked again before each run. `pins` None: trusted as written (the user's own file)."""

    hooks: HooksFile
    source: str
    pins: Mapping[str, Pin] | None = None


def merge_hooks(sets: Sequence[HookSet]) -> HooksFile:
    """The groups of several hooks files as one, in the order given (per event)."""
    events = {name: tuple(group for item in sets for group in item.hooks.groups(name)) for name in EVENTS}
    return HooksFile(source=" + ".join(item.source for item in sets), events={name: groups for name, groups in events.items() if groups})


def hook_commands(hooks_file: HooksFile) -> list[str]:
    """Every command string of the file, in file order (events in their fixed order)."""
    return [entry.command for name in EVENTS for group in hooks_file.groups(name) for entry in group.hooks]


# ------------------------------------------------------------------ running one hook


@dataclass
class HookRun:
    """What one hook process did: its exit status (None when it never ran or was killed at its
    timeout), its kept output, and why it failed to run, if it did."""

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    error: str = ""


async def run_hook(command: str, event_line: bytes, *, cwd: str, env: Mapping[str, str], timeout: float,
                   keep: int = OUTPUT_KEEP_BYTES) -> HookRun:
    """Run `sh -c command` in `cwd` with `env`, `event_line` on its standard input (then closed),
    in a process group of its own. It has `timeout` seconds to exit and close its output; then its
    group gets SIGTERM and, after a grace period, SIGKILL. Cancelling the run stops the group the
    same way. Of each output stream the first `keep` bytes are kept."""
    try:
        run = await run_program(["/bin/sh", "-c", command], cwd=cwd, env=env, timeout=timeout, head=keep,
                                stdin=event_line, grace=TERM_GRACE_SECS)
    except StartFailed as exc:
        return HookRun(None, error=f"it could not be started: {exc.error.strerror or exc.error}")
    if run.timed_out:
        return HookRun(None, timed_out=True)
    return HookRun(run.returncode, run.stdout.head.decode("utf-8", "replace"), run.stderr.head.decode("utf-8", "replace"))


# ------------------------------------------------------------------ verdicts


class _Specific(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)  # built at first use: most sessions never make one

    hookEventName: str | None = None
    permissionDecision: Literal["allow", "deny", "ask"] | None = None
    permissionDecisionReason: str | None = Field(None, max_length=MAX_VERDICT_TEXT * 4)
    updatedInput: dict[str, Any] | None = None
    additionalContext: str | None = Field(None, max_length=MAX_VERDICT_TEXT * 4)
    # PostToolUse: the visible result becomes this text (not an error). `updatedMCPToolOutput`,
    # Claude Code's field for MCP tools, is accepted as the same thing.
    updatedToolOutput: Any = None
    updatedMCPToolOutput: Any = None


class HookVerdict(BaseModel):
    """The JSON a hook may print on exit 0. Unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)  # built at first use: most sessions never make one

    decision: Literal["approve", "block"] | None = None
    reason: str | None = Field(None, max_length=MAX_VERDICT_TEXT * 4)
    systemMessage: str | None = Field(None, max_length=MAX_VERDICT_TEXT * 4)
    continue_: bool = Field(True, alias="continue")
    stopReason: str | None = Field(None, max_length=MAX_VERDICT_TEXT * 4)
    suppressOutput: bool = False
    hookSpecificOutput: _Specific | None = None


Decision = Literal["allow", "deny", "ask", "block"]


@dataclass
class HookResult:
    """One hook's verdict on one event, in the terms of that event."""

    command: str
    decision: Decision | None = None  # PreToolUse: allow/deny/ask; other events: block
    reason: str = ""
    updated_input: dict[str, Any] | None = None
    context: str = ""
    system_message: str = ""
    replacement: str | None = None  # PostToolUse: the result becomes this message
    error: str | None = None  # PostToolUse: the result becomes an error with this text
    stop: bool = False  # `continue: false`: stop what the event is about
    warning: str = ""

    def summary(self) -> str:
        if self.warning:
            return f"warning: {self.warning}"
        parts: list[str] = [self.decision or "no decision"]
        if self.updated_input is not None:
            parts.append("replaced the input")
        if self.error is not None:
            parts.append("replaced the result with an error")
        elif self.replacement is not None:
            parts.append("replaced the result")
        if self.context:
            parts.append("added context")
        text = ", ".join(parts)
        return f"{text} ({_shown(self.reason, 120)})" if self.reason else text


def interpret(event: EventName, dialect: Dialect, command: str, run: HookRun) -> HookResult:
    """A hook run's verdict, by the exit-code and JSON rules (see the module's docstring)."""
    result = HookResult(command)
    if run.error:
        result.warning = run.error
        return result
    if run.timed_out:
        result.warning = "it timed out and its process group was killed; the action goes on"
        return result
    if run.exit_code == 2:
        reason = run.stderr.strip()
        if not reason:
            result.warning = "it exited 2 without a reason on standard error, so it does not block"
            return result
        result.reason = _cut(reason)
        _block(event, result, result.reason)
        return result
    if run.exit_code != 0:
        detail = _shown(run.stderr.strip(), 160)
        result.warning = f"it exited {run.exit_code}{': ' + detail if detail else ''}; the action goes on"
        return result
    out = run.stdout.strip()
    if not out.startswith("{"):
        if out and dialect == "claude" and event == "UserPromptSubmit":
            result.context = _cut(out)
        return result
    try:
        verdict = HookVerdict.model_validate_json(out)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        result.warning = f"its output is not a valid verdict ({_shown(where + ': ' if where else '', 60)}{_shown(str(first['msg']), 100)}); the action goes on"
        return result
    _apply(event, dialect, verdict, result)
    return result


def refused(event: EventName, command: str, reason: str) -> HookResult:
    """A pinned hook that was not run because what it would run is not what was trusted: a
    warning, and a PreToolUse call is denied (a guard that cannot run must not let the call by)."""
    result = HookResult(command, warning=reason)
    if event == "PreToolUse":
        result.decision, result.reason = "deny", _cut(reason)
    return result


def _block(event: EventName, result: HookResult, reason: str) -> None:
    """What blocking means for each event; observation-only events ignore it."""
    if event == "PreToolUse":
        result.decision = "deny"
    elif event == "PostToolUse":
        result.decision = "block"
        result.error = reason
    elif event in ("Stop", "UserPromptSubmit"):
        result.decision = "block"


def _apply(event: EventName, dialect: Dialect, verdict: HookVerdict, result: HookResult) -> None:
    specific = verdict.hookSpecificOutput or _Specific()
    result.system_message = _cut(verdict.systemMessage or "", 2000)
    reason = specific.permissionDecisionReason if specific.permissionDecision and specific.permissionDecisionReason else verdict.reason
    result.reason = _cut(reason or "")
    result.context = _cut(specific.additionalContext or "")
    if event == "PreToolUse":
        if specific.permissionDecision is not None:
            result.decision = specific.permissionDecision
        elif verdict.decision is not None:
            result.decision = "allow" if verdict.decision == "approve" else "deny"
        result.updated_input = specific.updatedInput
        if not verdict.continue_:
            result.decision = "deny"
            result.reason = _cut(verdict.stopReason or result.reason or "a hook stopped this call")
        return
    if event == "PostToolUse":
        replacement = specific.updatedToolOutput if specific.updatedToolOutput is not None else specific.updatedMCPToolOutput
        if replacement is not None:
            text = replacement if isinstance(replacement, str) else json.dumps(replacement, ensure_ascii=False)
            result.replacement = _cut(text)
        if verdict.decision == "block":
            _block(event, result, result.reason or "a hook rejected this result")
        if not verdict.continue_:
            _block(event, result, _cut(verdict.stopReason or result.reason or "a hook stopped after this call"))
        return
    if event == "Stop":
        if verdict.decision == "block":
            if result.reason:
                result.decision = "block"
            else:
                result.warning = "it asked to continue without a reason, so the task ends"
        result.stop = not verdict.continue_
        return
    if event == "UserPromptSubmit":
        if verdict.decision == "block" or not verdict.continue_:
            result.decision = "block"
            result.reason = _cut(verdict.stopReason or result.reason) if not verdict.continue_ else result.reason
        return
    # SessionStart, SessionEnd, PreCompact: observation only.
    result.context = ""
    result.reason = ""


# ------------------------------------------------------------------ the claude dialect


def claude_tool_name(name: str) -> str:
    return CLAUDE_TOOL_NAMES.get(name, name)


def osprey_tool_name(name: str) -> str:
    for ours, theirs in CLAUDE_TOOL_NAMES.items():
        if theirs == name:
            return ours
    return name


def claude_permission_mode(approval_policy: str) -> str:
    """Claude Code's `permission_mode` for an Osprey approval policy."""
    return "bypassPermissions" if approval_policy == "never" else "default"


def _absolute(value: Any, cwd: str) -> Any:
    if not isinstance(value, str):
        return value
    return os.path.normpath(os.path.join(cwd, value))


def claude_tool_input(name: str, arguments: Mapping[str, Any], cwd: str) -> dict[str, Any]:
    """A call's input as Claude Code names it: `path` of file tools becomes an absolute
    `file_path`; directory paths of the search tools become absolute (the working directory
    when empty for `list_directory`)."""
    renames = {ours: (theirs, absolute) for ours, theirs, absolute in _FIELDS.get(name, ())}
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if key not in renames:
            out[key] = value
            continue
        theirs, absolute = renames[key]
        if absolute:
            if value == "" and name != "list_directory":
                continue
            value = _absolute(value or ".", cwd)
        out[theirs] = value
    if name == "list_directory" and "path" not in out:
        out["path"] = os.path.normpath(cwd)
    return out


def osprey_tool_input(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A Claude-named input (a hook's `updatedInput`) back in Osprey's field names."""
    renames = {theirs: ours for ours, theirs, _ in _FIELDS.get(name, ())}
    return {renames.get(key, key): value for key, value in arguments.items()}


def claude_tool_response(name: str, arguments: Mapping[str, Any], outcome: ToolOutcome, cwd: str) -> dict[str, Any]:
    response: dict[str, Any] = {"success": not outcome.is_error, "output": outcome.text}
    if outcome.is_error:
        response["error"] = outcome.category or "tool_error"
    if name == "bash":
        response.update(stdout=outcome.text, stderr="", interrupted=outcome.category == "cancelled")
    path = arguments.get("path")
    if name in ("read_file", "write_file", "edit_file") and isinstance(path, str):
        response["filePath"] = _absolute(path, cwd)
    return response


def _transcript_lines(messages: Sequence[Message], cwd: str, session_id: str) -> list[str]:
    """Claude Code-style transcript lines (`{"type": "user"|"assistant", "message": {...}}`)."""
    from ..messages import AssistantMessage, ToolResultMessage, UserMessage

    def cut(text: str) -> str:
        return _cut(text, TRANSCRIPT_TEXT_CHARS)

    lines: list[str] = []
    for message in messages:
        entry: dict[str, Any]
        if isinstance(message, UserMessage):
            entry = {"type": "user", "message": {"role": "user", "content": cut(message.content)}}
        elif isinstance(message, AssistantMessage):
            content: list[dict[str, Any]] = []
            if message.text:
                content.append({"type": "text", "text": cut(message.text)})
            for call in message.tool_calls:
                content.append({"type": "tool_use", "id": call.id, "name": claude_tool_name(call.name),
                                "input": claude_tool_input(call.name, call.arguments, cwd)})
            entry = {"type": "assistant", "message": {"role": "assistant", "content": content}}
        elif isinstance(message, ToolResultMessage):
            entry = {"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": cut(message.content), "is_error": message.is_error},
            ]}}
        else:
            continue
        entry.update(sessionId=session_id, cwd=cwd)
        lines.append(json.dumps(entry, ensure_ascii=False))
    return lines


def write_transcript(path: Path, messages: Sequence[Message], *, cwd: str, session_id: str, max_bytes: int = TRANSCRIPT_MAX_BYTES) -> None:
    """Rewrite the JSONL transcript at `path` (0600, in a 0700 directory): the newest messages
    whose lines fit in `max_bytes`. Raises OSError."""
    kept: list[str] = []
    size = 0
    for line in reversed(_transcript_lines(messages, cwd, session_id)):
        size += len(line.encode("utf-8")) + 1
        if size > max_bytes:
            break
        kept.append(line)
    text = "".join(line + "\n" for line in reversed(kept))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------ the interceptor


@dataclass
class _Combined:
    """The verdicts of the hooks that ran for one event, combined."""

    results: list[HookResult] = field(default_factory=list)

    def decision(self) -> Decision | None:
        for wanted in ("deny", "block", "ask", "allow"):
            if any(r.decision == wanted for r in self.results):
                return wanted
        return None

    def reasons(self, decision: str) -> str:
        return "; ".join(r.reason for r in self.results if r.decision == decision and r.reason)

    def context(self) -> str:
        return "\n".join(r.context for r in self.results if r.context)


class HooksInterceptor(Interceptor):
    """Runs a hooks file's commands at the session's interception points.

    `cwd` is the agent's working directory (hooks run there), `project_dir` the workspace root
    (`OSPREY_PROJECT_DIR`, and `CLAUDE_PROJECT_DIR` for the claude dialect), `env` the session's
    host tool environment (None: Osprey's own without credentials, `config.tool_environment()`). `emit` receives a Notice for every event at which hooks ran (what ran,
    what each decided; a warning level when one failed) and for each `systemMessage`. `messages`
    returns the conversation for the claude dialect's transcript file, written as
    `transcript_dir/<session_id>.jsonl` before each claude-dialect hook run. `warn` gets what
    SessionEnd hooks report (the session's events have ended by then)."""

    name = "hooks"
    order = Order.HOOKS

    def __init__(
        self,
        hooks_file: HooksFile | Sequence[HookSet],
        *,
        cwd: str,
        session_id: str,
        env: Mapping[str, str] | None,
        emit: Callable[[Event], None],
        project_dir: str | None = None,
        messages: Callable[[], Sequence[Message]] | None = None,
        transcript_dir: Path | None = None,
        permission_mode: str = "default",
        stop_cap: int = STOP_CONTINUATION_CAP,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        sets = [HookSet(hooks_file, hooks_file.source)] if isinstance(hooks_file, HooksFile) else list(hooks_file)
        self.hooks_file = merge_hooks(sets)
        # The pinned entries, by identity: what their trust covers, checked before each run.
        self._pins: dict[int, tuple[str, Pin | None]] = {}
        for item in sets:
            if item.pins is None:
                continue
            for name in EVENTS:
                for group in item.hooks.groups(name):
                    for entry in group.hooks:
                        self._pins[id(entry)] = (item.source, item.pins.get(entry.command))
        self.cwd = cwd
        self.session_id = session_id
        if env is None:
            from ..config import tool_environment

            env = tool_environment()
        self.env = dict(env)
        self.emit = emit
        self.project_dir = project_dir or cwd
        self.messages = messages
        self.transcript_dir = transcript_dir
        self.permission_mode = permission_mode
        self.stop_cap = stop_cap
        self.warn = warn
        self.stop_count = 0  # forced continuations of the current task
        self._transcript_lock = asyncio.Lock()

    # -- plumbing

    @property
    def transcript_path(self) -> Path | None:
        if self.transcript_dir is None:
            return None
        return self.transcript_dir / f"{self.session_id}.jsonl"

    def _env(self, dialect: Dialect) -> dict[str, str]:
        env = dict(self.env)
        env["OSPREY_PROJECT_DIR"] = self.project_dir
        if dialect == "claude":
            env["CLAUDE_PROJECT_DIR"] = self.project_dir
        return env

    def _notice(self, message: str, level: Literal["info", "warning"] = "info") -> None:
        from ..events import Notice

        self.emit(Notice(message=message, level=level))

    async def _transcript(self) -> str:
        path = self.transcript_path
        if path is None:
            return ""
        async with self._transcript_lock:
            messages = list(self.messages()) if self.messages is not None else []
            try:
                await asyncio.to_thread(write_transcript, path, messages, cwd=self.cwd, session_id=self.session_id)
            except OSError as exc:
                self._notice(f"hooks: the transcript {path} could not be written: {exc.strerror or exc}", "warning")
        return str(path)

    def _event(self, event: EventName, dialect: Dialect, fields: Mapping[str, Any], transcript: str) -> dict[str, Any]:
        body: dict[str, Any] = {"session_id": self.session_id, "cwd": self.cwd, "hook_event_name": event}
        if dialect == "claude":
            body["transcript_path"] = transcript
            body["permission_mode"] = self.permission_mode
        body.update(fields)
        return body

    async def _dispatch(self, event: EventName, subject: Callable[[Dialect], str] | None,
                        fields: Callable[[Dialect], Mapping[str, Any]], label: str, tool: str = "") -> _Combined:
        """Run every hook of the groups that match, in parallel; results in file order. `tool` is
        the Osprey name of the call's tool, for a claude-dialect `updatedInput`."""
        chosen: list[tuple[HookGroup, HookEntry]] = []
        for group in self.hooks_file.groups(event):
            if subject is not None and not group.matches(subject(group.dialect)):
                continue
            chosen.extend((group, entry) for entry in group.hooks)
        combined = _Combined()
        if not chosen:
            return combined
        transcript = await self._transcript() if any(g.dialect == "claude" for g, _ in chosen) else ""
        lines = {d: (json.dumps(self._event(event, d, fields(d), transcript), ensure_ascii=False) + "\n").encode("utf-8")
                 for d in {g.dialect for g, _ in chosen}}

        async def one(group: HookGroup, entry: HookEntry) -> HookResult:
            env = self._env(group.dialect)
            pinned = self._pins.get(id(entry))
            if pinned is None:
                run = await run_hook(entry.command, lines[group.dialect], cwd=self.cwd, env=env, timeout=entry.timeout_secs)
            else:
                source, pin = pinned
                try:
                    if pin is None:
                        raise PinMismatch("its trust pin does not cover this command")
                    prepared = await asyncio.to_thread(prepare_hook, entry.command, pin.identities, cwd=self.cwd, project_dir=self.project_dir,
                                                       scope=pin.scope, search_path=env.get("PATH", os.defpath))
                except PinMismatch as exc:
                    return refused(event, entry.command, f"it was not run: {exc}. Review {source} and what it runs, then "
                                   "`osprey extensions trust hooks`")
                try:
                    run = await run_hook(prepared.line, lines[group.dialect], cwd=self.cwd, env=env, timeout=entry.timeout_secs)
                finally:
                    prepared.close()
            result = interpret(event, group.dialect, entry.command, run)
            if result.updated_input is not None and group.dialect == "claude":
                result.updated_input = osprey_tool_input(tool, result.updated_input)
            return result

        combined.results = list(await asyncio.gather(*(one(g, e) for g, e in chosen)))
        self._report(event, label, combined)
        return combined

    def _report(self, event: EventName, label: str, combined: _Combined) -> None:
        """One notice per event at which hooks ran, plus one per systemMessage. SessionEnd comes
        after the session's last event, so its report goes to `warn`, and only when a hook warned
        or left a message."""
        warned = any(r.warning for r in combined.results)
        parts = [f"{_shown(r.command, 80)}: {r.summary()}" for r in combined.results]
        head = f"hooks {event}{f' ({label})' if label else ''}"
        messages = [f"hook {_shown(r.command, 80)}: {_shown(r.system_message, 2000)}" for r in combined.results if r.system_message]
        if event == "SessionEnd":
            if self.warn is not None:
                for line in ([f"{head}: " + "; ".join(parts)] if warned else []) + messages:
                    self.warn(line)
            return
        self._notice(f"{head}: " + "; ".join(parts), "warning" if warned else "info")
        for line in messages:
            self._notice(line)

    # -- tool calls

    def _tool_fields(self, call: PendingCall) -> Callable[[Dialect], dict[str, Any]]:
        def fields(dialect: Dialect) -> dict[str, Any]:
            if dialect == "claude":
                return {"tool_name": claude_tool_name(call.name), "tool_input": claude_tool_input(call.name, call.arguments, call.cwd or self.cwd),
                        "tool_use_id": call.id}
            return {"tool_name": call.name, "tool_input": dict(call.arguments), "tool_use_id": call.id}
        return fields

    @staticmethod
    def _subject(name: str) -> Callable[[Dialect], str]:
        return lambda dialect: claude_tool_name(name) if dialect == "claude" else name

    async def before_call(self, call: PendingCall) -> Verdict | None:
        if not self.hooks_file.groups("PreToolUse"):
            return None
        combined = await self._dispatch_tool("PreToolUse", call, self._tool_fields(call))
        if not combined.results:
            return None
        decision = combined.decision()
        context = combined.context()
        source = "hook"
        if decision == "deny":
            return Verdict("deny", combined.reasons("deny") or "a PreToolUse hook denied this call", source, category="denied", context=context)
        replaced = next((r.updated_input for r in combined.results if r.updated_input is not None), None)
        if replaced is not None:
            call.arguments = dict(replaced)  # the floor judges the call again when its input changed
        if decision in ("allow", "ask") and changes_user_hooks(call.name, call.arguments):
            decision = None  # only the person allows a change to their own hooks (`guard.UserHooksGuard` asks)
        if decision == "ask":
            return Verdict("ask", combined.reasons("ask") or "a PreToolUse hook asks for approval", source, arguments=replaced, context=context)
        if decision == "allow":
            return Verdict("allow", combined.reasons("allow"), source, arguments=replaced, context=context)
        if replaced is not None or context:
            return Verdict("continue", "", source, arguments=replaced, context=context)
        return None

    async def _dispatch_tool(self, event: EventName, call: PendingCall, fields: Callable[[Dialect], Mapping[str, Any]]) -> _Combined:
        return await self._dispatch(event, self._subject(call.name), fields, call.name, tool=call.name)

    async def after_call(self, call: PendingCall, outcome: ToolOutcome) -> ToolOutcome | None:
        if not self.hooks_file.groups("PostToolUse"):
            return None
        base = self._tool_fields(call)

        def fields(dialect: Dialect) -> dict[str, Any]:
            body = base(dialect)
            if dialect == "claude":
                body["tool_response"] = claude_tool_response(call.name, call.arguments, outcome, call.cwd or self.cwd)
            else:
                body["tool_response"] = {"ok": not outcome.is_error, "output": outcome.text, "error_category": outcome.category,
                                         "truncated_chars": outcome.truncated_chars}
            return body

        combined = await self._dispatch_tool("PostToolUse", call, fields)
        if not combined.results:
            return None
        context = combined.context()
        if context:
            call.context.append(context)
        from ..tools.base import ToolOutcome

        error = next((r.error for r in combined.results if r.error is not None), None)
        if error is not None:
            return ToolOutcome(text=f"Error (hook): {error}", is_error=True, category="hook")
        replacement = next((r.replacement for r in combined.results if r.replacement is not None), None)
        if replacement is not None:
            return ToolOutcome(text=replacement)
        return None

    # -- the task

    async def prompt_submitted(self, prompt: PromptSubmission) -> PromptVerdict | None:
        self.stop_count = 0  # a new task
        if not self.hooks_file.groups("UserPromptSubmit"):
            return None
        combined = await self._dispatch("UserPromptSubmit", None, lambda d: {"prompt": prompt.text}, "")
        if not combined.results:
            return None
        context = combined.context()
        if combined.decision() == "block":
            return PromptVerdict(block=True, reason=combined.reasons("block") or "a UserPromptSubmit hook blocked it", context=context, source="a UserPromptSubmit hook")
        return PromptVerdict(context=context, source="hook") if context else None

    async def completion_candidate(self, candidate: CompletionCandidate) -> Continuation | None:
        if not self.hooks_file.groups("Stop"):
            return None

        def fields(dialect: Dialect) -> dict[str, Any]:
            body: dict[str, Any] = {"stop_count": self.stop_count, "last_assistant_message": candidate.text}
            if dialect == "claude":
                body["stop_hook_active"] = self.stop_count > 0
            return body

        combined = await self._dispatch("Stop", None, fields, "")
        if any(r.stop for r in combined.results) or combined.decision() != "block":
            return None
        if self.stop_count >= self.stop_cap:
            self._notice(f"hooks Stop: a stop hook asked for another turn, but it already continued this task {self.stop_count} times "
                         f"(the cap is {self.stop_cap}), so the task ends", "warning")
            return None
        self.stop_count += 1
        return Continuation(reason=combined.reasons("block"), source=f"a Stop hook (continuation {self.stop_count} of at most {self.stop_cap})")

    async def before_compaction(self, reason: Literal["manual", "auto"], messages: int) -> None:
        if not self.hooks_file.groups("PreCompact"):
            return
        await self._dispatch("PreCompact", lambda d: reason, lambda d: {"trigger": reason, "custom_instructions": ""}, reason)

    async def session_start(self, event: SessionStart) -> None:
        if self.hooks_file.groups("SessionStart"):
            await self._dispatch("SessionStart", lambda d: "startup", lambda d: {"source": "startup"}, "")

    async def session_end(self, event: SessionEnd) -> None:
        if self.hooks_file.groups("SessionEnd"):
            await self._dispatch("SessionEnd", lambda d: "other",
                                 lambda d: {"reason": "other", "outcome": event.outcome, "exit_status": event.exit_status}, "")
