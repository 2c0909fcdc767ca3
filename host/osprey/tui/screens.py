"""Modal pickers: a model from the catalog (type to filter), a journaled session from a tree."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static, Tree
from textual.widgets.option_list import Option

from ..catalog import Catalog, ModelInfo
from ..sessions.journal import SessionRow
from ..terminal_text import clean

MAX_TITLE = 40


def _model_label(model: ModelInfo, current: str) -> str:
    parts = [("● " if model.id == current else "  ") + model.id]
    if model.context_window:
        parts.append(f"{model.context_window // 1000}k context")
    if model.input_price is not None and model.output_price is not None:
        parts.append(f"${model.input_price:g}/${model.output_price:g} per M")
    return "  ·  ".join(parts)


class ModelPicker(ModalScreen[str | None]):
    """The models of one provider: the list shown at once, then the refreshed one from `catalogs`;
    typing filters; Enter picks (the typed name itself when nothing matches); Esc leaves."""

    DEFAULT_CSS = """
    ModelPicker { align: center middle; }
    ModelPicker > Vertical { width: 90%; max-width: 100; height: 80%; border: round $accent; background: $surface; padding: 0 1; }
    ModelPicker OptionList { height: 1fr; }
    ModelPicker #catalog-note { color: $text-muted; height: auto; }
    """
    BINDINGS = [Binding("escape", "dismiss_none", "leave"), Binding("down", "focus_list", show=False)]

    def __init__(self, provider: str, current: str, catalogs: Callable[[], AsyncIterator[Catalog]]) -> None:
        super().__init__()
        self.provider, self.current, self.catalogs = provider, current, catalogs
        self.models: list[ModelInfo] = []
        self.note = Static("loading the catalog…", id="catalog-note", markup=False)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(clean(f"Model for {self.provider} (type to filter, Enter picks, Esc leaves)"), markup=False)
            yield Input(placeholder="model name", id="model-filter")
            yield OptionList(id="models")
            yield self.note

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        self._load()

    @work(exclusive=True, group="catalog")
    async def _load(self) -> None:
        try:
            async for catalog in self.catalogs():
                self.show(catalog)
        except Exception as exc:  # noqa: BLE001 - a catalog that cannot load leaves the picker usable by name
            self.note.update(clean(f"the catalog could not be loaded ({type(exc).__name__}: {exc}); type a model name"))

    def show(self, catalog: Catalog) -> None:
        self.models = catalog.for_provider(self.provider, agents_only=True)
        when = f"fetched {catalog.fetched_at.astimezone():%Y-%m-%d %H:%M}" if catalog.fetched_at else catalog.source
        if catalog.stale:
            self.note.update(clean(f"offline or stale ({when}): {catalog.problem or 'the refresh failed'}"))
        else:
            self.note.update(clean(f"{len(self.models)} models · {when}"))
        self._fill()

    def _fill(self) -> None:
        typed = self.query_one(Input).value.strip().lower()
        shown = [m for m in self.models if typed in m.id.lower() or typed in (m.name or "").lower()]
        options = self.query_one(OptionList)
        highlighted = options.highlighted_option.id if options.highlighted_option is not None else self.current
        options.clear_options()
        # A label is content shown as it is: a str would be read as markup.
        options.add_options([Option(Content(clean(_model_label(m, self.current))), id=m.id) for m in shown])
        ids = [m.id for m in shown]
        options.highlighted = ids.index(highlighted) if highlighted in ids else (0 if ids else None)

    @on(Input.Changed)
    def _filter(self) -> None:
        self._fill()

    @on(Input.Submitted)
    def _submit_typed(self, event: Input.Submitted) -> None:
        options = self.query_one(OptionList)
        if options.highlighted_option is not None and options.highlighted_option.id:
            self.dismiss(options.highlighted_option.id)
        elif event.value.strip():
            self.dismiss(event.value.strip())

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_focus_list(self) -> None:
        self.query_one(OptionList).focus()

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


def _short(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home and home != "/" and (path == home or path.startswith(home + os.sep)) else path


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M")


def session_label(row: SessionRow, *, current: str | None = None) -> str:
    title = " ".join(clean(row.title).split())
    title = title if len(title) <= MAX_TITLE else title[:MAX_TITLE - 1] + "…"
    mark = "● " if row.id == current else ""
    outcome = f"  ·  {row.outcome or 'running'}" if row.parent_id else ""  # a child's: how it ended
    return f"{mark}{_when(row.updated)}  {title or '(no prompt)'}  ·  {row.id[:12]}{outcome}"


def grouped(rows: Sequence[SessionRow], cwd: str) -> list[tuple[str, list[SessionRow]]]:
    """Sessions by working directory: `cwd` first, then the directories by their newest session;
    newest first within each."""
    groups: dict[str, list[SessionRow]] = {}
    for row in sorted(rows, key=lambda r: r.updated, reverse=True):
        groups.setdefault(row.cwd, []).append(row)
    order = sorted(groups, key=lambda d: (d != cwd, -groups[d][0].updated))
    return [(d, groups[d]) for d in order]


class SessionsScreen(ModalScreen[SessionRow | None]):
    """A tree of journaled sessions grouped by directory; Enter on a session picks it, Esc leaves."""

    DEFAULT_CSS = """
    SessionsScreen { align: center middle; }
    SessionsScreen > Vertical { width: 90%; max-width: 110; height: 80%; border: round $accent; background: $surface; padding: 0 1; }
    SessionsScreen Tree { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "dismiss_none", "leave")]

    def __init__(self, rows: Sequence[SessionRow], cwd: str, current: str | None = None) -> None:
        super().__init__()
        self.rows, self.cwd, self.current = list(rows), cwd, current

    def compose(self) -> ComposeResult:
        tree: Tree[SessionRow | None] = Tree("sessions", id="sessions")
        tree.show_root = False
        for directory, rows in grouped(self.rows, self.cwd):
            label = _short(directory) + ("  (here)" if directory == self.cwd else "")
            # A label is a Text shown as it is: a str would be read as markup.
            branch = tree.root.add(Text(clean(label)), expand=directory == self.cwd, data=None)
            # A child session (a subagent's) is shown under the session that started it.
            ids = {row.id for row in rows}
            under: dict[str, list[SessionRow]] = {}
            for row in rows:
                if row.parent_id in ids:
                    under.setdefault(row.parent_id, []).append(row)
            pending = [(branch, row) for row in reversed(rows) if row.parent_id not in ids]
            while pending:
                node, row = pending.pop()
                shown = Text(clean(session_label(row, current=self.current)))
                kids = under.pop(row.id, [])
                if not kids:
                    node.add_leaf(shown, data=row)
                    continue
                added = node.add(shown, data=row, expand=False)
                pending.extend((added, kid) for kid in reversed(kids))
        with Vertical():
            yield Static("Sessions (Enter resumes one, Esc leaves)", markup=False)
            yield tree
            if not self.rows:
                yield Static("no journaled sessions yet", markup=False)

    def on_mount(self) -> None:
        tree = self.query_one(Tree)
        tree.focus()
        first = next((n for n in tree.root.children[:1] for n in n.children[:1]), None)
        if first is not None:
            tree.move_cursor(first)

    @on(Tree.NodeSelected)
    def _picked(self, event: Tree.NodeSelected[SessionRow | None]) -> None:
        if event.node.data is not None:
            self.dismiss(event.node.data)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class PersonaPicker(ModalScreen[str | None]):
    """The personas a session may switch to (name, where it comes from, description): Enter picks,
    Esc leaves."""

    DEFAULT_CSS = """
    PersonaPicker { align: center middle; }
    PersonaPicker > Vertical { width: 90%; max-width: 100; height: auto; max-height: 80%; border: round $accent; background: $surface; padding: 0 1; }
    PersonaPicker OptionList { height: auto; max-height: 20; }
    """
    BINDINGS = [Binding("escape", "dismiss_none", "leave")]

    def __init__(self, personas: Sequence[tuple[str, str, str]], current: str | None) -> None:
        """`personas`: (name, source, description) each."""
        super().__init__()
        self.personas, self.current = list(personas), current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Persona for the next turns (Enter picks, Esc leaves)", markup=False)
            yield OptionList(*[
                Option(Content(clean(f"{'● ' if name == self.current else '  '}{name}  ({source})" + (f"  ·  {description}" if description else ""))), id=name)
                for name, source, description in self.personas
            ], id="personas")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
