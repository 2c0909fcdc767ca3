"""The dialogs of the slash commands: saved approvals, the transcript export, this session, and the
debug information. They show what they are given and call down for the work (the approval store's
functions, the transcript's Markdown, the journal's operations), showing the errors where they are."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Label, RadioButton, RadioSet, Static, Switch

from ..errors import OspreyError
from ..policy import saved
from ..policy.store import ApprovalStore
from ..terminal_text import clean

_BOX = "{name} {{ align: center middle; }} {name} > Vertical {{ width: 90%; max-width: {width}; height: auto; max-height: 90%; " \
       "border: round $accent; background: $surface; padding: 0 1; }} {name} .error {{ color: $error; height: auto; }} " \
       "{name} .said {{ color: $success; height: auto; }} {name} .buttons {{ height: auto; margin-top: 1; }} " \
       "{name} .buttons Button {{ margin-right: 1; }} {name} .heading {{ text-style: bold; }}"


def _box(name: str, width: int = 100) -> str:
    return _BOX.format(name=name, width=width)


class ConfirmDialog(ModalScreen[bool]):
    """A yes-or-no question; Esc is no."""

    DEFAULT_CSS = _box("ConfirmDialog", 80)
    BINDINGS = [Binding("escape", "no", "no")]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question, self.yes = question, yes

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(clean(self.question), markup=False)
            with Horizontal(classes="buttons"):
                yield Button(self.yes, id="yes", variant="error")
                yield Button("Cancel", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed, "#yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def action_no(self) -> None:
        self.dismiss(False)


class ApprovalsDialog(ModalScreen[None]):
    """The saved approval rules that apply in a workspace (id, rule, scope): revoke the selected
    one (after a confirmation), or add a rule for this project or everywhere."""

    DEFAULT_CSS = _box("ApprovalsDialog", 110) + " ApprovalsDialog DataTable { height: auto; max-height: 14; } " \
                                                 "ApprovalsDialog RadioSet { height: auto; } ApprovalsDialog #rule { width: 1fr; }"
    BINDINGS = [Binding("escape", "close", "close")]

    def __init__(self, store: ApprovalStore, workspace: str) -> None:
        super().__init__()
        self.store, self.workspace = store, workspace
        self.rules: list[saved.ShownRule] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Saved approvals: tool calls that run without asking in this workspace", markup=False, classes="heading")
            yield Static(clean(self.workspace), markup=False, id="workspace")
            table: DataTable[Text] = DataTable(id="rules", cursor_type="row", zebra_stripes=True)
            yield table
            yield Static("", markup=False, id="empty")
            with Horizontal(classes="buttons"):
                yield Button("Revoke", id="revoke", variant="error")
                yield Button("Close", id="close")
            yield Label("Add a rule, such as read_file, bash(git diff *) or write_file(src/**):")
            yield Input(placeholder="rule", id="rule")
            with RadioSet(id="scope"):
                yield RadioButton("this project", value=True, id="project")
                yield RadioButton("everywhere", id="everywhere")
            with Horizontal(classes="buttons"):
                yield Button("Add", id="add", variant="primary")
            yield Static("", markup=False, id="error", classes="error")
            yield Static("", markup=False, id="said", classes="said")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("ID", "RULE", "SCOPE")
        self.query_one("#rule", Input).focus()
        self.reload()

    def _say(self, error: str = "", said: str = "") -> None:
        self.query_one("#error", Static).update(clean(error))
        self.query_one("#said", Static).update(clean(said))

    @work(exclusive=True, group="approvals")
    async def reload(self) -> None:
        try:
            rules = await asyncio.to_thread(saved.applying, self.store, self.workspace)
        except OspreyError as exc:
            rules = []
            self._say(error=str(exc))
        self._show(rules)

    def _show(self, rules: list[saved.ShownRule]) -> None:
        self.rules = rules
        table = self.query_one(DataTable)
        table.clear()
        for rule in rules:
            table.add_row(Text(rule.id), Text(clean(rule.rule)), Text(clean(rule.scope)), key=rule.id)
        self.query_one("#empty", Static).update("" if rules else "no saved approval rules apply here")
        self.query_one("#revoke", Button).disabled = not rules

    def selected(self) -> saved.ShownRule | None:
        table = self.query_one(DataTable)
        if not self.rules or table.cursor_row is None or not 0 <= table.cursor_row < len(self.rules):
            return None
        return self.rules[table.cursor_row]

    @on(Button.Pressed, "#revoke")
    @work(exclusive=True, group="approvals")
    async def revoke(self) -> None:
        rule = self.selected()
        if rule is None:
            self._say(error="select a rule to revoke")
            return
        if not await self.app.push_screen_wait(ConfirmDialog(f"Revoke {rule.id}: {rule.rule} ({rule.scope})?", yes="Revoke")):
            return
        try:
            gone = await asyncio.to_thread(saved.revoke, self.store, rule.id)
        except OspreyError as exc:
            self._say(error=str(exc))
        else:
            self._say(said=f"revoked {gone.id}: {gone.rule}")
        self._show(await self._listed())

    @on(Button.Pressed, "#add")
    @on(Input.Submitted, "#rule")
    @work(exclusive=True, group="approvals")
    async def add(self) -> None:
        text = self.query_one("#rule", Input).value
        everywhere = self.query_one("#everywhere", RadioButton).value
        try:
            rule, new = await asyncio.to_thread(saved.add, self.store, text, workspace=self.workspace, everywhere=everywhere)
        except OspreyError as exc:
            self._say(error=str(exc))
            return
        where = "everywhere" if everywhere else "for this project"
        self._say(said=f"{'saved' if new else 'already saved'} {rule.rule} {where} (id {rule.id})")
        self.query_one("#rule", Input).value = ""
        self._show(await self._listed())

    async def _listed(self) -> list[saved.ShownRule]:
        try:
            return await asyncio.to_thread(saved.applying, self.store, self.workspace)
        except OspreyError as exc:
            self._say(error=str(exc))
            return []

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(None)


# Writes the transcript to a path: with tool output or not; raises OSError.
Write = Callable[[Path, bool], Awaitable[None]]


class ExportDialog(ModalScreen[Path | None]):
    """The transcript export: a path (relative to `base`), with or without the tools' output;
    an existing file is overwritten only once confirmed. Dismissed with the path written."""

    DEFAULT_CSS = _box("ExportDialog") + " ExportDialog .switch { height: auto; } ExportDialog .switch Label { padding: 1 1 0 1; }"
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, default: str, base: Path, write: Write) -> None:
        super().__init__()
        self.default, self.base, self.write = default, base, write

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Export the transcript as Markdown", markup=False, classes="heading")
            yield Label("Path (relative to the working directory):")
            yield Input(self.default, id="path")
            with Horizontal(classes="switch"):
                yield Switch(value=True, id="tool-output")
                yield Label("include tool output (off: each tool call on one line)")
            with Horizontal(classes="buttons"):
                yield Button("Export", id="export", variant="primary")
                yield Button("Cancel", id="cancel")
            yield Static("", markup=False, id="error", classes="error")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def target(self) -> Path:
        return (self.base / Path(self.query_one(Input).value.strip()).expanduser()).resolve()

    @on(Button.Pressed, "#export")
    @on(Input.Submitted, "#path")
    @work(exclusive=True, group="export")
    async def export(self) -> None:
        error = self.query_one("#error", Static)
        if not self.query_one(Input).value.strip():
            error.update("give a path to write the transcript to")
            return
        path = self.target()
        if path.is_dir():
            error.update(clean(f"{path} is a directory: give a file name"))
            return
        if path.exists() and not await self.app.push_screen_wait(ConfirmDialog(f"{path} exists. Overwrite it?", yes="Overwrite")):
            return
        try:
            await self.write(path, self.query_one(Switch).value)
        except OSError as exc:
            error.update(clean(f"could not write {path}: {exc.strerror or exc}"))
            return
        self.dismiss(path)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class SessionDialog(ModalScreen[tuple[str, str] | None]):
    """This session (id, title, journal, turns, usage) with its actions: dismissed with
    ("rename", TITLE), ("fork", "") or ("delete", "") (once confirmed), or None."""

    DEFAULT_CSS = _box("SessionDialog") + " SessionDialog #title { width: 1fr; }"
    BINDINGS = [Binding("escape", "close", "close")]

    def __init__(self, lines: Sequence[str], title: str, *, session_id: str, journaled: bool, children: int = 0,
                 check_title: Callable[[str], str] | None = None) -> None:
        """`check_title`: the title as it would be saved, or raises OspreyError saying what is wrong."""
        super().__init__()
        self.lines, self.title_now, self.session_id = list(lines), title, session_id
        self.journaled, self.child_count, self.check_title = journaled, children, check_title

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("This session", markup=False, classes="heading")
            yield Static(clean("\n".join(self.lines)), markup=False, id="info")
            yield Label("Title:")
            yield Input(self.title_now, id="title", disabled=not self.journaled)
            with Horizontal(classes="buttons"):
                yield Button("Rename", id="rename", disabled=not self.journaled)
                yield Button("Fork from here", id="fork", disabled=not self.journaled)
                yield Button("Delete", id="delete", variant="error", disabled=not self.journaled)
                yield Button("Close", id="close")
            note = "" if self.journaled else "this session is not journaled: it cannot be renamed, forked or deleted"
            yield Static(note, markup=False, id="error", classes="error")

    def on_mount(self) -> None:
        self.query_one("#close" if not self.journaled else "#title").focus()

    @on(Button.Pressed, "#rename")
    @on(Input.Submitted, "#title")
    def _rename(self) -> None:
        title = self.query_one("#title", Input).value
        if self.check_title is not None:
            try:
                title = self.check_title(title)
            except OspreyError as exc:
                self.query_one("#error", Static).update(clean(str(exc)))
                return
        self.dismiss(("rename", title))

    @on(Button.Pressed, "#fork")
    def _fork(self) -> None:
        self.dismiss(("fork", ""))

    @on(Button.Pressed, "#delete")
    @work(exclusive=True, group="session")
    async def _delete(self) -> None:
        more = f", its {self.child_count} child sessions" if self.child_count else ""
        question = (f"Delete session {self.session_id}{more}, their events and their stored tool outputs? "
                    "It cannot be undone; a fresh session starts.")
        if await self.app.push_screen_wait(ConfirmDialog(question, yes="Delete")):
            self.dismiss(("delete", ""))

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(None)


class DebugDialog(ModalScreen[None]):
    """Version, date, system, terminal, session and model; a switch for the raw events; Copy puts
    the text on the clipboard."""

    DEFAULT_CSS = _box("DebugDialog") + " DebugDialog .switch { height: auto; } DebugDialog .switch Label { padding: 1 1 0 1; }"
    BINDINGS = [Binding("escape", "close", "close")]

    def __init__(self, text: str, *, raw_events: bool, on_raw_events: Callable[[bool], None]) -> None:
        super().__init__()
        self.text, self.raw_events, self.on_raw_events = text, raw_events, on_raw_events

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Debug information", markup=False, classes="heading")
            yield Static(clean(self.text), markup=False, id="info")
            with Horizontal(classes="switch"):
                yield Switch(value=self.raw_events, id="raw-events")
                yield Label("show the raw events in the conversation")
            with Horizontal(classes="buttons"):
                yield Button("Copy", id="copy", variant="primary")
                yield Button("Close", id="close")
            yield Static("", markup=False, id="said", classes="said")

    def on_mount(self) -> None:
        self.query_one("#copy", Button).focus()

    @on(Switch.Changed, "#raw-events")
    def _raw(self, event: Switch.Changed) -> None:
        self.on_raw_events(event.value)

    @on(Button.Pressed, "#copy")
    def _copy(self) -> None:
        self.app.copy_to_clipboard(self.text)
        self.query_one("#said", Static).update("copied to the clipboard")

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(None)
