"""The conversation's rows: prompts, answers (streamed Markdown), tool calls, notices; the prompt input."""

from __future__ import annotations

import codecs
import functools
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Collapsible, Static, TextArea
from textual.widgets.collapsible import CollapsibleTitle

from ..events import Question, ToolCallEvent, ToolResultEvent
from ..terminal_text import clean, escaped, split_unfinished
from . import commands
from .completion import CompletionMenu, needs_argument
from .transcript import PromptHistory, call_line, edit_diff, format_arguments

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.rules_core import StateCore
    from textual.widgets import Markdown

MAX_LIVE_OUTPUT = 20_000  # characters of a command's live output kept (its tail)
LIVE_LINES = 100  # lines of that tail shown while the command runs
LIVE_REFRESH = 0.08  # seconds between two redraws of the live output at most
MAX_RESULT_SHOWN = 20_000


def _time(at: datetime) -> str:
    return at.astimezone().strftime("%H:%M:%S")


class Stamp(Static):
    """A message's time; shown when the app has the `-timestamps` class."""

    DEFAULT_CSS = "Stamp { display: none; color: $text-muted; height: 1; }"


class UserRow(Vertical):
    DEFAULT_CSS = "UserRow { height: auto; margin: 1 0 0 0; } UserRow > .text { color: $accent; text-style: bold; }"

    def __init__(self, text: str, at: datetime) -> None:
        super().__init__()
        self.text, self.at = text, at

    def compose(self) -> ComposeResult:
        yield Stamp(_time(self.at))
        yield Static("> " + clean(self.text), markup=False, classes="text")


def _markdown_parser() -> MarkdownIt:
    """The Markdown parser of answers: its tokens are cleaned once parsed, so a character reference
    (`&#13;`, `&#x202e;`) cannot bring back what `clean` took out of the source."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("gfm-like")
    parser.core.ruler.push("terminal_text", _clean_tokens)
    return parser


def _clean_tokens(state: StateCore) -> None:
    tokens = list(state.tokens)
    while tokens:
        token = tokens.pop()
        token.content = clean(token.content)
        token.info = clean(token.info)
        if token.attrs:
            token.attrs = {key: clean(value) if isinstance(value, str) else value for key, value in token.attrs.items()}
        if token.children:
            tokens.extend(token.children)


@functools.cache
def answer_markdown() -> type[Markdown]:
    """The widget of a model's Markdown: drawn from cleaned source through `_markdown_parser`; a
    link it holds opens (when clicked) only if it is http or https. Made at its first use, so the
    Markdown renderer loads after the first screen."""
    from textual.widgets import Markdown

    class AnswerMarkdown(Markdown):
        def __init__(self, markdown: str | None = None) -> None:
            super().__init__(clean(markdown) if markdown else markdown, parser_factory=_markdown_parser, open_links=False)

        def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
            href = event.href
            if urlsplit(href).scheme.lower() in ("http", "https") and href.isprintable():
                self.app.open_url(href)

    return AnswerMarkdown


class AnswerRow(Vertical):
    """An assistant answer: whole, or written through a stream as the text arrives (cleaned first)."""

    DEFAULT_CSS = "AnswerRow { height: auto; } AnswerRow > Markdown { margin: 0; padding: 0 1; }"

    def __init__(self, at: datetime, text: str | None = None) -> None:
        super().__init__()
        self.at = at
        self.markdown = answer_markdown()(text)

    def compose(self) -> ComposeResult:
        yield Stamp(_time(self.at))
        yield self.markdown


class NoticeRow(Static):
    """A line of the conversation: its text is shown plain and cleaned."""

    DEFAULT_CSS = """
    NoticeRow { color: $text-muted; height: auto; }
    NoticeRow.warning { color: $warning; }
    NoticeRow.error { color: $error; }
    NoticeRow.done { color: $success; }
    """

    def __init__(self, text: str, **kwargs: Any) -> None:
        kwargs["markup"] = False
        super().__init__(clean(text), **kwargs)


def plain(text: str) -> Content:
    """`text` as content shown as it is (a collapsible's title or a list's label is read as markup
    when it is a str)."""
    return Content(text)


def last_lines(text: str, count: int) -> str:
    """The last `count` lines of `text`, after a line "…" if there were more."""
    cut = len(text) - 1 if text.endswith("\n") else len(text)
    for _ in range(count):
        cut = text.rfind("\n", 0, cut)
        if cut < 0:
            return text
    return "…" + text[cut:]


class ToolRow(Collapsible):
    """One tool call: name and arguments, live output while it runs, the result when it ends."""

    DEFAULT_CSS = """
    ToolRow { height: auto; margin: 0; padding: 0; border: none; }
    ToolRow .arguments { color: $text-muted; }
    ToolRow .output { height: auto; }
    ToolRow.failed > CollapsibleTitle { color: $error; }
    ToolRow .category { color: $error; text-style: bold; }
    ToolRow.stopped > CollapsibleTitle { color: $warning; }
    ToolRow.stopped .category { color: $warning; }
    """

    def __init__(self, event: ToolCallEvent) -> None:
        self.call = event
        diff = edit_diff(event.name, event.arguments)
        self.arguments = Static(diff_text("\n".join(diff)) if diff is not None else format_arguments(event.arguments), markup=False, classes="arguments")
        self.output = Static("", markup=False, classes="output")
        self.category = Static("", markup=False, classes="category")
        self._live = ""
        self._drawn = 0.0  # when the live output was last drawn (time.monotonic)
        self._timer: Timer | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        super().__init__(self.arguments, self.category, self.output, title=self._heading("…"), collapsed=event.name != "bash")  # type: ignore[arg-type]

    def _heading(self, mark: str) -> Content:
        """The title: the call's name and its first argument, control characters written out."""
        return plain(f"{mark} {call_line(self.call.name, self.call.arguments)}")

    def add_output(self, chunk: bytes) -> None:
        """Keep the output's tail; redraw it now if the last redraw is LIVE_REFRESH old, else when it is.

        A command can stream megabytes in thousands of chunks: redrawing (and measuring) the row for each
        one would keep the UI from the keyboard."""
        self._live = (self._live + self._decoder.decode(chunk))[-MAX_LIVE_OUTPUT:]
        if self._timer is not None:
            return  # a redraw is due already and will show this chunk too
        wait = self._drawn + LIVE_REFRESH - time.monotonic()
        if wait <= 0 or not self.is_mounted:
            self._show_live()
        else:
            self._timer = self.set_timer(wait, self._show_live)

    def _show_live(self) -> None:
        self._timer = None
        self._drawn = time.monotonic()
        self.output.update(clean(split_unfinished(last_lines(self._live, LIVE_LINES))[0]))

    def _stop_live(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def finish(self, result: ToolResultEvent) -> None:
        self._stop_live()
        self.add_class("finished")  # /tools hides finished rows
        stopped = result.error_category == "cancelled"  # stopped while it ran: what it printed is kept
        self.title = self._heading("✓" if result.ok else "■" if stopped else "✗")  # type: ignore[assignment]
        shown = result.output[:MAX_RESULT_SHOWN]
        if len(result.output) > MAX_RESULT_SHOWN or result.truncated_chars:
            shown += "\n[…]"
        self.output.update(clean(shown))
        if stopped:
            self.add_class("stopped")
            self.category.update(f"stopped after {result.duration_ms / 1000:.1f} s")
        elif not result.ok:
            self.add_class("failed")
            self.category.update(clean(f"error: {result.error_category or 'failed'}"))
        else:
            self.collapsed = True


class PromptArea(TextArea):
    """The prompt: Enter submits; shift+enter or ctrl+j adds a line; up and down walk the history
    (from the first and last line); Tab completes a slash command, or else goes to the tool rows;
    PageUp and PageDown scroll the conversation, and so do Home and End while the prompt is empty.
    While its slash-command menu is open, up, down, Tab, Enter and Esc are the menu's: the prompt
    handles them itself, in order with the characters typed before them, so the menu always answers
    for the text the prompt holds."""

    DEFAULT_CSS = "PromptArea { height: auto; max-height: 10; min-height: 3; }"

    class Submitted(Message):
        def __init__(self, area: PromptArea, text: str) -> None:
            super().__init__()
            self.area = area
            self.text = text

    class Scroll(Message):
        """Scroll the conversation: `page_up`, `page_down`, `home` or `end`."""

        def __init__(self, where: str) -> None:
            super().__init__()
            self.where = where

    class ToRows(Message):
        """Go to the conversation's rows (Tab with nothing to complete)."""

    def __init__(self, menu: CompletionMenu | None = None, **kwargs: object) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, compact=False, **kwargs)  # type: ignore[arg-type]
        self.prompts = PromptHistory()
        self.menu = menu

    def take(self, chosen: commands.Command) -> None:
        """Run the chosen command, or put it in the prompt when it needs an argument."""
        if needs_argument(chosen):
            self.fill(f"/{chosen.name} ")
            return
        line = f"/{chosen.name}"
        self.prompts.add(line)
        self.clear()
        if self.menu is not None:
            self.menu.hide()
        self.post_message(self.Submitted(self, line))

    def fill(self, line: str) -> None:
        self.load_text(line)
        self.move_cursor(self.document.end)
        self.focus()

    def _menu_key(self, key: str) -> bool:
        """Handle `key` as the open menu's; False when the menu is closed or the key is not its."""
        menu = self.menu
        if menu is None or key not in ("up", "down", "tab", "enter", "escape") or not menu.shown:
            return False
        menu.show_for(self.text)  # the last change may not have reached the menu yet
        if not menu.shown:
            return False
        chosen = menu.current
        if key in ("up", "down"):
            menu.move(-1 if key == "up" else 1)
        elif key == "escape":
            menu.hide()
        elif chosen is None:
            return False
        elif key == "tab":
            self.fill(f"/{chosen.name} ")
        else:
            typed = commands.parse(self.text)
            if typed is None or typed[0] == chosen.name:
                return False  # a command typed in full (with or without its argument) is sent as typed
            self.take(chosen)
        return True

    async def _on_key(self, event: events.Key) -> None:
        if self._menu_key(event.key):
            event.prevent_default()
            event.stop()
            return
        if event.key == "enter":
            event.prevent_default()
            event.stop()
            text = self.text
            if text.strip():
                self.prompts.add(text)
                self.post_message(self.Submitted(self, text))
                self.clear()
            return
        if event.key in ("shift+enter", "ctrl+j"):
            event.prevent_default()
            event.stop()
            self.insert("\n")
            return
        if event.key in ("tab", "shift+tab"):
            event.prevent_default()
            event.stop()
            # The menu knows the session's workflow commands and the built-ins workflows hide.
            completed = (self.menu.complete(self.text) if self.menu is not None else commands.complete(self.text)) if event.key == "tab" else None
            if completed is not None:
                self.load_text(completed)
                self.move_cursor(self.document.end)
            else:
                self.post_message(self.ToRows())
            return
        scroll = {"pageup": "page_up", "pagedown": "page_down", "home": "home", "end": "end"}.get(event.key)
        if scroll is not None and (scroll.startswith("page") or not self.text):
            event.prevent_default()
            event.stop()
            self.post_message(self.Scroll(scroll))
            return
        if event.key == "up" and self.cursor_location[0] == 0:
            found = self.prompts.previous(self.text)
            if found is not None:
                event.prevent_default()
                event.stop()
                self.load_text(found)
                self.move_cursor((0, len(found.split("\n")[0])))
            return
        if event.key == "down" and self.cursor_location[0] == self.document.line_count - 1:
            found = self.prompts.next()
            if found is not None:
                event.prevent_default()
                event.stop()
                self.load_text(found)
                self.move_cursor(self.document.end)
            return
        await super()._on_key(event)


def diff_text(patch: str) -> Text:
    """A unified diff coloured by line: additions green, removals red, hunks and headers dimmed;
    control characters in it written out (it shows what a file holds, or will)."""
    out = Text()
    for line in escaped(patch).splitlines():
        if line.startswith(("+++", "---", "diff ", "index ")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        else:
            style = ""
        out.append(line + "\n", style=style)
    return out


class Conversation(VerticalScroll):
    """The conversation's rows. Its foldable rows (tool calls, diffs, summaries) open and close
    from the keyboard: up and down walk their titles, Enter or Space opens or closes the one in
    focus, Esc (or Tab) goes back to the prompt; PageUp, PageDown, Home and End scroll."""

    DEFAULT_CSS = "Conversation.-hide-finished-tools ToolRow.finished { display: none; }"
    HIDE_FINISHED = "-hide-finished-tools"

    BINDINGS = [
        Binding("up", "walk(-1)", "previous row", show=False),
        Binding("down", "walk(1)", "next row", show=False),
        Binding("space", "open_close", "open or close", show=False),
        Binding("escape,tab,shift+tab", "leave", "back to the prompt", show=False),
    ]

    class Leave(Message):
        """The person leaves the rows for the prompt."""

    @property
    def finished_tools_hidden(self) -> bool:
        return self.has_class(self.HIDE_FINISHED)

    def toggle_finished_tools(self) -> bool:
        """Hide or show the tool rows whose call has ended (running ones, and those waiting for an
        approval, stay); True when they are hidden now."""
        self.toggle_class(self.HIDE_FINISHED)
        return self.finished_tools_hidden

    def titles(self) -> list[CollapsibleTitle]:
        return [t for t in self.query(CollapsibleTitle) if t.display and (t.parent is None or t.parent.display)]

    def enter(self) -> bool:
        """Focus the newest row's title; False when there is none."""
        titles = self.titles()
        if not titles:
            return False
        self._focus(titles[-1])
        return True

    def _focus(self, title: CollapsibleTitle) -> None:
        title.focus(scroll_visible=False)
        row = title.parent
        self.scroll_to_widget(row if isinstance(row, Collapsible) else title, animate=False)

    def action_walk(self, step: int) -> None:
        titles = self.titles()
        if not titles:
            return
        focused = self.screen.focused
        at = titles.index(focused) if isinstance(focused, CollapsibleTitle) and focused in titles else len(titles)
        self._focus(titles[max(0, min(len(titles) - 1, at + step))])

    def action_open_close(self) -> None:
        focused = self.screen.focused
        if isinstance(focused, CollapsibleTitle):
            focused.action_toggle_collapsible()

    def action_leave(self) -> None:
        self.post_message(self.Leave())

    def toggle_newest(self) -> bool:
        """Open or close the newest foldable row; False when there is none."""
        rows = [row for row in self.query(Collapsible) if row.parent is self and row.display]
        if not rows:
            return False
        rows[-1].collapsed = not rows[-1].collapsed
        self.scroll_to_widget(rows[-1], animate=False, top=rows[-1].collapsed is False)
        return True


class FoldRow(Collapsible):
    """A collapsible row of text: a compaction's summary, the workspace diff, a raw event."""

    DEFAULT_CSS = "FoldRow { height: auto; margin: 0; padding: 0; border: none; } FoldRow .body { height: auto; }"

    def __init__(self, title: str, body: str | Text, *, collapsed: bool = True, classes: str = "") -> None:
        """`body`: a str is cleaned; a Text must be built of cleaned text (`diff_text`)."""
        self.body = Static(clean(body) if isinstance(body, str) else body, markup=False, classes="body")
        super().__init__(self.body, title=plain(clean(title)), collapsed=collapsed, classes=classes)  # type: ignore[arg-type]


TODO_SHOWN = 8  # items of the model's task list shown above the prompt at most
TODO_MARKS = {"completed": "✓", "in_progress": "▸", "pending": "○"}


def todo_progress(items: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(completed, all) of a task list."""
    return sum(item.get("status") == "completed" for item in items), len(items)


def todo_text(items: Sequence[Mapping[str, Any]], shown: int = TODO_SHOWN) -> Text:
    """The task list, one item a line: ✓ completed (struck), ▸ in progress (bold), ○ pending. A long
    list shows a window of `shown` items around the one in progress (or the first not completed),
    with a line for what is left out above and below."""
    done, total = todo_progress(items)
    out = Text(f"tasks {done}/{total}", style="bold")
    at = next((n for n, item in enumerate(items) if item.get("status") == "in_progress"),
              next((n for n, item in enumerate(items) if item.get("status") != "completed"), max(total - 1, 0)))
    first = max(0, min(at - shown // 2, total - shown))
    last = min(total, first + shown)
    if first:
        out.append(f"\n  … {first} more above", style="dim")
    for item in items[first:last]:
        status = str(item.get("status", "pending"))
        style = {"completed": "dim strike", "in_progress": "bold"}.get(status, "")
        out.append(f"\n{TODO_MARKS.get(status, '○')} ", style="bold" if status == "in_progress" else "dim" if status == "completed" else "")
        out.append(" ".join(clean(str(item.get("content", ""))).split()), style=style)
    if last < total:
        out.append(f"\n  … {total - last} more below", style="dim")
    return out


class TodoPanel(Static):
    """The model's task list as it stands (its last `todo_write`), above the prompt; hidden while empty."""

    DEFAULT_CSS = """
    TodoPanel { height: auto; display: none; padding: 0 1; border-top: solid $panel; }
    TodoPanel.shown { display: block; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", markup=False, **kwargs)  # type: ignore[arg-type]
        self.items: list[Mapping[str, Any]] = []

    def show_items(self, items: Sequence[Mapping[str, Any]]) -> None:
        self.items = list(items)
        self.update(todo_text(self.items) if self.items else "")
        self.set_class(bool(self.items), "shown")


QUEUE_SHOWN = 3  # queued prompts listed above the prompt at most


class QueuePanel(Static):
    """The prompts typed while the model works, sent in order when the running task ends; hidden
    while empty."""

    DEFAULT_CSS = """
    QueuePanel { height: auto; display: none; padding: 0 1; color: $text-muted; border-top: solid $panel; }
    QueuePanel.shown { display: block; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", markup=False, **kwargs)  # type: ignore[arg-type]

    def show_prompts(self, prompts: Sequence[str]) -> None:
        lines = [f"queued ({len(prompts)}), sent when this task ends; Esc stops the task and drops them:"]
        for prompt in prompts[:QUEUE_SHOWN]:
            first = " ".join(clean(prompt).split())
            lines.append(f"  › {first[:100]}" + ("…" if len(first) > 100 else ""))
        if len(prompts) > QUEUE_SHOWN:
            lines.append(f"  … {len(prompts) - QUEUE_SHOWN} more")
        self.update("\n".join(lines) if prompts else "")
        self.set_class(bool(prompts), "shown")


class QuestionRow(Vertical):
    """The model's question and the person's answer (or that they closed it)."""

    DEFAULT_CSS = """
    QuestionRow { height: auto; margin: 1 0 0 0; }
    QuestionRow > .question { color: $accent; }
    QuestionRow > .answer { padding: 0 0 0 2; }
    QuestionRow > .unanswered { color: $text-muted; padding: 0 0 0 2; }
    """

    def __init__(self, event: Question, at: datetime) -> None:
        super().__init__()
        self.event, self.at = event, at

    def compose(self) -> ComposeResult:
        yield Stamp(_time(self.at))
        yield Static("? " + clean(self.event.question), markup=False, classes="question")
        if self.event.answer is None:
            yield Static("(closed without an answer)", markup=False, classes="unanswered")
        else:
            yield Static("→ " + (clean(self.event.answer) or "(an empty answer)"), markup=False, classes="answer")
