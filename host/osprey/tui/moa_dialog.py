"""Mixture of agents in the terminal UI: `/moa PROMPT` runs the default preset through the session
(`Session.moa`), and `/moa-config` opens the preset manager, which lists, adds, edits and deletes
the presets of the user's config.toml and picks the default one (`agents.moa_presets` writes it)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Label, Static

from ..agents.moa_presets import config_path, load_presets, parse_preset, save_presets
from ..config.schema import MoaSettings
from ..errors import OspreyError
from ..terminal_text import clean
from .dialogs import ConfirmDialog, _box

if TYPE_CHECKING:
    from ..config.schema import ResolvedMoa
    from .app import OspreyApp

PRESET_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


async def _presets(app: OspreyApp, session: Any) -> ResolvedMoa:
    """The presets as the configuration files hold them now (the manager may have changed them
    since the session started); the session's own when settings cannot be resolved here."""
    driver = app.driver
    if driver.settings_for is None:
        return session.settings.moa
    settings = await asyncio.to_thread(driver.settings_for, {})  # the launch's flags: [moa] does not depend on the model chosen since
    return settings.moa


async def run_moa(app: OspreyApp, prompt: str) -> None:
    """`/moa PROMPT`: the prompt through the default preset; the references' progress and the
    merged answer are shown as the session's events come. Esc stops it."""
    driver = app.driver
    prompt = prompt.strip()
    if not prompt:
        app.note("/moa PROMPT: give the prompt the models should answer (/moa-config manages the presets)", "warning")
        return
    session = driver.idle("/moa")
    if session is None:
        return
    try:
        presets = await _presets(app, session)
        from ..agents.moa import choose_preset

        choose_preset(presets)
    except OspreyError as exc:
        app.note(f"/moa: {exc}", "warning")
        return
    driver.working = True
    driver.set_state("mixture of agents working (Esc stops)")
    try:
        mounted = app.presenter.prompt(prompt)
        if mounted is not None:
            await mounted
        await session.moa(prompt, presets=presets)
    except (OspreyError, RuntimeError) as exc:
        app.note(f"/moa: {exc}", "error")
    finally:
        await app.presenter.end_answer()
        driver.working = False
        driver.set_state("ready")
        driver.send_queued()


async def manage_presets(app: OspreyApp) -> None:
    """`/moa-config`: the preset manager over the user's config.toml."""
    session = app.driver.session
    if session is None:
        app.note("/moa-config: the session has not started yet", "warning")
        return
    await app.push_screen_wait(MoaConfigDialog(config_path(session.settings.home)))


class MoaConfigDialog(ModalScreen[None]):
    """The Mixture of Agents presets of one config.toml: select one to edit, delete it or make it
    the default; the form below adds a preset (a new name) or replaces one (its name)."""

    DEFAULT_CSS = _box("MoaConfigDialog", 120) + " MoaConfigDialog DataTable { height: auto; max-height: 12; } " \
                                                 "MoaConfigDialog Input { width: 1fr; height: 1; border: none; padding: 0 1; background: $boost; } " \
                                                 "MoaConfigDialog .row { height: 1; margin-top: 1; } MoaConfigDialog .row Label { width: 18; } " \
                                                 "MoaConfigDialog > Vertical { overflow-y: auto; }"
    BINDINGS = [Binding("escape", "close", "close")]

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.moa = MoaSettings()
        self.names: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Mixture of Agents presets: reference models answer in parallel, the aggregator merges them", markup=False, classes="heading")
            yield Static(clean(str(self.path)), markup=False, id="path")
            table: DataTable[Text] = DataTable(id="presets", cursor_type="row", zebra_stripes=True)
            yield table
            yield Static("", markup=False, id="empty")
            with Horizontal(classes="buttons"):
                yield Button("Edit", id="edit")
                yield Button("Make default", id="default")
                yield Button("Delete", id="delete", variant="error")
                yield Button("Close", id="close")
            for key, label, hint in (
                ("name", "Name", "letters, digits, . _ -"),
                ("references", "Reference models", "2 to 8 models, separated by commas"),
                ("aggregator", "Aggregator", "the model that merges the answers"),
                ("providers", "Providers", "optional: MODEL=anthropic MODEL2=openai; others use the session's provider"),
                ("instructions", "Instructions", "optional: more instructions for the aggregator"),
            ):
                with Horizontal(classes="row"):
                    yield Label(label)
                    yield Input(placeholder=hint, id=key)
            with Horizontal(classes="buttons"):
                yield Button("Save preset", id="save", variant="primary")
            yield Static("", markup=False, id="error", classes="error")
            yield Static("", markup=False, id="said", classes="said")

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("PRESET", "REFERENCE MODELS", "AGGREGATOR", "DEFAULT")
        self.reload()

    def _say(self, error: str = "", said: str = "") -> None:
        self.query_one("#error", Static).update(clean(error))
        self.query_one("#said", Static).update(clean(said))

    @work(exclusive=True, group="moa-presets")
    async def reload(self) -> None:
        moa = await self._load()
        if moa is not None:
            self._show(moa)

    def _show(self, moa: MoaSettings) -> None:
        self.moa, self.names = moa, sorted(moa.presets)
        table = self.query_one(DataTable)
        table.clear()
        for name in self.names:
            preset = moa.presets[name]
            table.add_row(Text(clean(name)), Text(clean(", ".join(preset.reference_models))), Text(clean(preset.aggregator)),
                          Text("yes" if moa.default == name else ""), key=name)
        self.query_one("#empty", Static).update("" if self.names else "no presets yet: fill in the form below and save one")
        for button in ("#edit", "#default", "#delete"):
            self.query_one(button, Button).disabled = not self.names
        if self.focused is None:
            (table if self.names else self.query_one("#name", Input)).focus()

    def selected(self) -> str | None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        return self.names[row] if self.names and row is not None and 0 <= row < len(self.names) else None

    async def _write(self, moa: MoaSettings, said: str) -> bool:
        try:
            await asyncio.to_thread(save_presets, self.path, moa)
        except OspreyError as exc:
            self._say(error=str(exc))
            return False
        self._show(moa)
        self._say(said=said)
        return True

    @on(Button.Pressed, "#edit")
    def edit(self) -> None:
        """Put the selected preset into the form."""
        name = self.selected()
        if name is None:
            self._say(error="select a preset to edit")
            return
        preset = self.moa.presets[name]
        for key, value in (("name", name), ("references", ", ".join(preset.reference_models)), ("aggregator", preset.aggregator),
                           ("providers", ", ".join(f"{m}={p}" for m, p in preset.providers.items())),
                           ("instructions", preset.instructions or "")):
            self.query_one(f"#{key}", Input).value = value
        self._say(said=f"editing {name}: change it and save (a new name saves a copy)")

    @on(Button.Pressed, "#save")
    @work(exclusive=True, group="moa-presets")
    async def save(self) -> None:
        values = {key: self.query_one(f"#{key}", Input).value for key in ("name", "references", "aggregator", "providers", "instructions")}
        name = values["name"].strip()
        try:
            if not PRESET_NAME.fullmatch(name):
                raise OspreyError("give the preset a name of letters, digits, '.', '_' and '-' (at most 64)")
            preset = parse_preset(values["references"], values["aggregator"], values["providers"], values["instructions"])
            moa = await asyncio.to_thread(load_presets, self.path)  # the file as it is now
        except OspreyError as exc:
            self._say(error=str(exc))
            return
        old = moa.presets.get(name)
        if old is not None and old.timeout != preset.timeout:
            preset = preset.model_copy(update={"timeout": old.timeout})  # what the form does not show is kept
        updated = MoaSettings(default=moa.default or name, presets={**moa.presets, name: preset})
        if await self._write(updated, f"{'replaced' if old is not None else 'added'} {name}" + (" (the default)" if updated.default == name else "")):
            for key in values:
                self.query_one(f"#{key}", Input).value = ""

    async def _load(self) -> MoaSettings | None:
        """The presets in the file as it is now, or None (the problem said in the dialog)."""
        try:
            return await asyncio.to_thread(load_presets, self.path)
        except OspreyError as exc:
            self._say(error=str(exc))
            return None

    @on(Button.Pressed, "#default")
    @work(exclusive=True, group="moa-presets")
    async def make_default(self) -> None:
        name = self.selected()
        if name is None:
            self._say(error="select the preset /moa should use")
            return
        moa = await self._load()
        if moa is None:
            return
        if name not in moa.presets:
            self._say(error=f"{name} is no longer in the file")
            self._show(moa)
            return
        await self._write(moa.model_copy(update={"default": name}), f"/moa now uses {name}")

    @on(Button.Pressed, "#delete")
    @work(exclusive=True, group="moa-presets")
    async def delete(self) -> None:
        name = self.selected()
        if name is None:
            self._say(error="select a preset to delete")
            return
        if not await self.app.push_screen_wait(ConfirmDialog(f"Delete the preset {name}?", yes="Delete")):
            return
        moa = await self._load()
        if moa is None:
            return
        presets = {k: v for k, v in moa.presets.items() if k != name}
        default = moa.default if moa.default != name else None
        note = "; no preset is the default now: pick one" if moa.default == name and presets else ""
        await self._write(MoaSettings(default=default, presets=presets), f"deleted {name}{note}")

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(None)
