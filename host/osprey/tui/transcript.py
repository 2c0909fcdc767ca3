"""The conversation as the TUI keeps it: for /export, /copy and the prompt history."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from ..events import ToolResultEvent
from ..messages import recorded_image_notes
from ..terminal_text import clean, escaped

Role = Literal["user", "assistant", "tool", "notice", "question", "todo"]
MAX_ARGUMENT_CHARS = 4000  # in an exported transcript; the approval prompt shows the whole call


@dataclass
class Entry:
    role: Role
    text: str
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    # A tool entry that starts a call: the call on one line (an export without tool output shows
    # only this); None for a result.
    call: str | None = None


SUMMARY_CHARS = 80  # of a call's first argument, in its one-line form


def call_summary(arguments: dict[str, Any]) -> str:
    """A call's first telling argument (command, path, pattern or action), its first line cut to
    SUMMARY_CHARS, with "…" when more was left out; "" when it has none."""
    for key in ("command", "path", "pattern", "action"):
        value = arguments.get(key)
        if isinstance(value, str) and value:
            line = value.splitlines()[0] if value.strip() else value
            return line[:SUMMARY_CHARS] + ("…" if len(value) > SUMMARY_CHARS or "\n" in value.strip() else "")
    return ""


def call_line(name: str, arguments: dict[str, Any]) -> str:
    """A call on one line: its tool and its first telling argument, control characters written out."""
    summary = call_summary(arguments)
    return escaped(name + (f"  {summary}" if summary else ""))


def code_span(text: str) -> str:
    """`text` as a Markdown code span on one line, whatever backticks it holds."""
    text = " ".join(text.splitlines())
    run = longest = 0
    for c in text:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def format_arguments(arguments: dict[str, Any]) -> str:
    """A call's arguments, one `key: value` a line; strings as they are (a bash command whole),
    but for their control characters, written out (`\\x1b`): what runs is shown, never acted on."""
    lines = []
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(escaped(f"{key}: {shown}"))
    return "\n".join(lines)


MAX_RESULT_CHARS = 2000  # of a tool's result, in an exported transcript


def result_mark(result: ToolResultEvent) -> str:
    """How a call ended, for the transcript: ok, stopped (with how long it ran) or its error."""
    if result.ok:
        return "ok"
    if result.error_category == "cancelled":
        return f"stopped after {result.duration_ms / 1000:.1f} s"
    return f"error: {result.error_category}"


def image_lines(result: ToolResultEvent) -> str:
    """A line for each image a result carries (`[image: image/png, 12 KB]`), each after a line break."""
    images = result.images
    return "".join(f"\n{note}" for note in recorded_image_notes(images))


def result_text(output: str, limit: int = MAX_RESULT_CHARS) -> str:
    """A result's head within `limit`, and its last line (a command's status: its exit code, or
    that it was stopped) when that falls past the cut."""
    if len(output) <= limit:
        return output
    last = output.rstrip("\n").rsplit("\n", 1)[-1][:200]
    return f"{output[:limit]}\n[… {len(output) - limit} more characters]\n{last}"


# An edit's diff is shown up to this many lines (the arguments themselves are in the model's record).
MAX_DIFF_LINES = 400


def edit_diff(name: str, arguments: dict[str, Any]) -> list[str] | None:
    """The unified diff an `edit_file` call asks for (its old text against its new text), or None
    for other calls. `write_file` shows no diff: only the new content is known before it runs."""
    if name != "edit_file":
        return None
    old, new, path = arguments.get("old_string"), arguments.get("new_string"), arguments.get("path", "")
    if not isinstance(old, str) or not isinstance(new, str):
        return None
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), fromfile=f"a/{path}", tofile=f"b/{path}", lineterm="", n=2))
    if arguments.get("replace_all"):
        lines.insert(0, "(every occurrence)")
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"[… {len(lines) - MAX_DIFF_LINES} more lines]"]
    return lines


def question_markdown(question: str, answer: str | None) -> str:
    """A question the model asked and what came back, for the transcript."""
    said = "_(closed without an answer)_" if answer is None else quoted(answer) if answer else "_(an empty answer)_"
    return f"{quoted(question)}\n\n**Answer:**\n\n{said}"


def quoted(text: str) -> str:
    return "\n".join("> " + line for line in text.strip().splitlines()) or ">"


TODO_BOXES = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}


def todo_markdown(items: Sequence[Mapping[str, Any]]) -> str:
    """A task list as a Markdown checklist ([x] completed, [~] in progress, [ ] pending)."""
    if not items:
        return "_(cleared)_"
    lines = []
    for item in items:
        status = str(item.get("status", "pending"))
        content = " ".join(str(item.get("content", "")).split())
        lines.append(f"- {TODO_BOXES.get(status, '[ ]')} {content}" + (" _(in progress)_" if status == "in_progress" else ""))
    return "\n".join(lines)


@dataclass
class Transcript:
    entries: list[Entry] = field(default_factory=list)

    def add(self, role: Role, text: str, at: datetime | None = None, *, call: str | None = None) -> Entry:
        """Add an entry (its text cleaned: /copy puts it on the clipboard, /export in a file);
        `at`: when it happened (a replayed event's time), by default now; `call`: a tool call's
        one-line form."""
        text = clean(text)
        call = clean(call) if call is not None else None
        entry = Entry(role, text, call=call) if at is None else Entry(role, text, at, call=call)
        self.entries.append(entry)
        return entry

    def last_answer(self) -> str | None:
        for entry in reversed(self.entries):
            if entry.role == "assistant" and entry.text.strip():
                return entry.text
        return None

    def to_markdown(self, *, title: str = "Osprey transcript", tool_output: bool = True) -> str:
        """The conversation as Markdown. With `tool_output`, each tool call with its arguments and
        its result in a code block, the task lists and the notes; without, the prompts, answers and
        questions, and each call as one line."""
        parts = [f"# {title}\n"]
        for entry in self.entries:
            if not tool_output and entry.role in ("notice", "todo"):
                continue
            if entry.role == "user":
                parts.append("## You\n\n" + entry.text.strip() + "\n")
            elif entry.role == "assistant":
                parts.append("## Osprey\n\n" + entry.text.strip() + "\n")
            elif entry.role == "question":
                parts.append("## Osprey asks\n\n" + entry.text.strip() + "\n")
            elif entry.role == "todo":
                parts.append("**Tasks:**\n\n" + entry.text.strip() + "\n")
            elif entry.role == "tool" and not tool_output:
                if entry.call is not None:
                    parts.append(f"- tool: {code_span(entry.call)}\n")
            elif entry.role == "tool":
                body = entry.text[:MAX_ARGUMENT_CHARS]
                fence = "````" if "```" in body else "```"
                parts.append(f"{fence}text\n{body.rstrip()}\n{fence}\n")
            else:
                parts.append(quoted(entry.text) + "\n")
        return "\n".join(parts)


class PromptHistory:
    """This session's prompts, walked with up and down; the line being typed is kept."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index = 0
        self._draft = ""

    def add(self, prompt: str) -> None:
        if prompt and (not self.items or self.items[-1] != prompt):
            self.items.append(prompt)
        self._index = len(self.items)
        self._draft = ""

    def previous(self, current: str) -> str | None:
        if self._index == 0:
            return None
        if self._index == len(self.items):
            self._draft = current
        self._index -= 1
        return self.items[self._index]

    def next(self) -> str | None:
        if self._index >= len(self.items):
            return None
        self._index += 1
        return self._draft if self._index == len(self.items) else self.items[self._index]
