"""How a headless session shows itself: JSON Lines, or readable lines on a terminal."""

from __future__ import annotations

import codecs
import json
import sys
from dataclasses import dataclass, field
from typing import TextIO

from .events import AssistantText, Compaction, Event, Notice, SessionEnd, SessionStart, TaskEnd, ToolCallEvent, ToolResultEvent
from .messages import recorded_image_notes, scrub
from .numbers import counted, grouped
from .terminal_text import StreamCleaner, clean

PREVIEW_LINES = 8
# Lines of a command's live output shown as it runs; past them its result shows the end.
LIVE_LINES = 200


class JsonlWriter:
    """One JSON object per line per event, flushed at once (the schema is docs/events.md)."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out

    def __call__(self, event: Event) -> None:
        try:
            line = event.model_dump_json()
        except ValueError:
            # A str no encoder accepts (a lone surrogate): write the event with it replaced,
            # never end the session over it.
            line = json.dumps(scrub(event.model_dump(mode="python")), default=str)
        try:
            self.out.write(line + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass  # a closed pipe must not stop the session; its teardown still runs

    def text(self, delta: str) -> None:
        """Streaming text is not an event; the whole text arrives as assistant_text."""

    def tool_output(self, call_id: str, chunk: bytes) -> None:
        """Live output is not an event either; the whole output arrives in tool_result."""


@dataclass
class _Live:
    """A running command's output as it is shown: decoded and cleaned across chunks."""

    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))
    cleaner: StreamCleaner = field(default_factory=StreamCleaner)
    lines: int = 0
    at_line_start: bool = True
    shown: bool = False  # some output was written


@dataclass(eq=False)
class _Call:
    """A lead-session call whose header is on the screen and whose result has not come."""

    id: str
    label: str  # its name and first argument: the header repeated above output that does not follow it
    live: _Live | None


class TerminalRenderer:
    """Readable progress for a person watching a terminal."""

    def __init__(self, out: TextIO = sys.stdout, err: TextIO = sys.stderr, color: bool = True) -> None:
        self.out = out
        self.err = err
        self.color = color
        self._streaming = False
        self._stream = StreamCleaner()  # streamed text may cut an escape sequence in two
        self._calls: list[_Call] = []  # the lead session's calls still running, in the order they came
        # The call whose header, output or result was the last thing written to `out` (None: something
        # else was). Calls run together print their headers first: a result that does not follow its
        # own call gets the call's name again above it.
        self._last: _Call | None = None

    def _style(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def text(self, delta: str) -> None:
        shown = self._stream.feed(delta)
        if shown:
            self._out(shown)
        self._streaming = True

    def _out(self, text: str, call: _Call | None = None) -> None:
        """Write `text` to `out`, as part of `call`'s rows or of none."""
        last = self._last
        if last is not call and last is not None and last.live is not None and last.live.shown and not last.live.at_line_start:
            # A call's live output stopped mid-line: end the line before anything else is written.
            self._write(self.out, "\n")
            last.live.at_line_start = True
        self._write(self.out, text)
        self._last = call

    def _under(self, call: _Call) -> None:
        """Make what comes next sit under `call`: its name again when something else came between."""
        if self._last is not call:
            self._out(self._style(f"↳ {call.label}", "36") + "\n", call)

    def _find(self, call_id: str) -> _Call | None:
        return next((call for call in self._calls if call.id == call_id), None)

    @staticmethod
    def _write(stream: TextIO, text: str) -> None:
        try:
            stream.write(text)
            stream.flush()
        except UnicodeEncodeError:
            encoding = getattr(stream, "encoding", None) or "utf-8"
            stream.write(text.encode(encoding, "replace").decode(encoding))
            stream.flush()
        except (OSError, ValueError):
            pass

    def tool_output(self, call_id: str, chunk: bytes) -> None:
        """Live output of a running call (bash), shown indented as it comes."""
        call = self._find(call_id)
        live = call.live if call is not None else None
        if call is None or live is None or live.lines >= LIVE_LINES:
            return
        text = live.cleaner.feed(live.decoder.decode(chunk))
        if not text:
            return
        self._under(call)
        pieces: list[str] = []
        for line in text.splitlines(keepends=True):
            if live.lines >= LIVE_LINES:
                break
            if live.at_line_start:
                pieces.append("  ")
            pieces.append(line)
            live.at_line_start = line.endswith("\n")
            if live.at_line_start:
                live.lines += 1
                if live.lines >= LIVE_LINES:
                    pieces.append(self._style("  … (more output; the result shows its end)", "2") + "\n")
        if pieces:
            live.shown = True
            self._out("".join(pieces), call)

    def _end_live(self, call: _Call) -> bool:
        """Close a call's live output; whether any was shown."""
        live = call.live
        if live is None or not live.shown:
            return False
        if not live.at_line_start:
            self._out("\n", call)
            live.at_line_start = True
        return True

    def _end_stream(self) -> None:
        if self._streaming:
            self._out(self._stream.end() + "\n")
            self._streaming = False

    def __call__(self, event: Event) -> None:
        if event.agent_id is not None:
            self._child(event)
        elif isinstance(event, SessionStart):
            self._out(self._style(clean(f"osprey · {event.provider}/{event.model} · tools on {event.tool_service} · {event.cwd}"), "2") + "\n")
        elif isinstance(event, AssistantText):
            if self._streaming:
                self._end_stream()
            else:
                self._out(clean(event.text) + "\n")
        elif isinstance(event, ToolCallEvent):
            self._end_stream()
            args = [f"{clean(k)}={_short(v)}" for k, v in event.arguments.items()]
            name = clean(event.name)
            first = (args[0] + (", …" if len(args) > 1 else "")) if args else ""
            call = _Call(event.id, f"{name}({first})", _Live() if event.requested_by is None else None)
            self._calls.append(call)
            self._out(self._style(f"▸ {name}({', '.join(args)})", "36") + "\n", call)
        elif isinstance(event, ToolResultEvent):
            self._result(event)
        elif isinstance(event, Compaction):
            self._end_stream()
            self._write(self.err, self._style(f"osprey: the conversation ({event.messages_before} messages) was compacted into a summary ({clean(event.reason)})", "33") + "\n")
        elif isinstance(event, Notice):
            self._end_stream()
            self._write(self.err, self._style(f"osprey: {clean(event.message)}", "33") + "\n")
        elif isinstance(event, SessionEnd):
            self._end_stream()
            if event.outcome == "TerminalToolSucceeded" and event.final_text:
                self._out(clean(event.final_text) + "\n")  # the persona's validated result: the run's output
            u = event.usage
            summary = f"{event.outcome} · {counted(event.turns, 'turn')} · {grouped(u.input_tokens)} input / {grouped(u.output_tokens)} output tokens"
            if event.error:
                self._out(self._style(f"✘ {summary}: {clean(event.error)}", "31") + "\n")
            else:
                self._out(self._style(f"{'✔' if event.exit_status == 0 else '✘'} {summary}", "32" if event.exit_status == 0 else "31") + "\n")

    def _result(self, event: ToolResultEvent) -> None:
        """A call's result, under its call (after its output, if that was shown as it came)."""
        call = self._find(event.id)
        streamed = call is not None and self._end_live(call)
        if call is not None:
            self._calls.remove(call)
            self._under(call)
        lines = _clean_lines(event.output) or [""]
        style = "2" if event.ok else "31"
        # A line for each image it returned (its data is never printed).
        images = [clean(note) for note in recorded_image_notes(event.images)]
        if streamed:
            # Its output is on the screen already: its status line (exit code, stopped) follows.
            self._out("\n".join([self._style("  " + lines[-1], "33" if event.error_category == "cancelled" else style),
                                 *(self._style("  " + note, style) for note in images)]) + "\n", call)
            return
        shown = lines[:PREVIEW_LINES]
        if len(lines) > PREVIEW_LINES:
            shown.append(f"… {len(lines) - PREVIEW_LINES} more lines")
        if images and shown == [""]:
            shown = []  # no text: the images' lines alone
        self._out("\n".join(self._style("  " + line, style) for line in shown + images) + "\n", call)

    def _child(self, event: Event) -> None:
        """A child session's event: its calls and how it ended, marked with its id (its text, the
        parent reports)."""
        who = self._style(f"[{clean(event.agent_id or '')}]", "35")
        if isinstance(event, ToolCallEvent):
            self._end_stream()
            self._out(f"{who} " + self._style(f"▸ {clean(event.name)}", "36") + "\n")
        elif isinstance(event, TaskEnd):
            self._end_stream()
            self._out(f"{who} " + self._style(f"{event.outcome} · {counted(event.turns, 'turn')}", "2") + "\n")
        elif isinstance(event, Notice) and event.level == "warning":
            self._end_stream()
            self._write(self.err, f"{who} " + self._style(f"osprey: {clean(event.message)}", "33") + "\n")


def _clean_lines(text: str) -> list[str]:
    return clean(text).splitlines()


def _short(value: object, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", "⏎")
    return repr(text[:limit] + "…") if len(text) > limit else repr(text)
