"""Pilot tests of /moa and /moa-config: the mixture runs against the scripted model server on
loopback, and the preset manager writes a real config.toml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_moa import PRESET, RETRY, models_server, of_model, said
from test_tui import SIZE, notices, started, type_prompt, until
from textual.widgets import Button, DataTable, Input

from osprey.config import Settings, load_settings
from osprey.events import Event, TaskEnd
from osprey.session.core import Session, SessionOptions
from osprey.testing.model_server import ModelServer, Reply
from osprey.tomlfile import loads
from osprey.tui import commands
from osprey.tui.app import OspreyApp
from osprey.tui.dialogs import ConfirmDialog
from osprey.tui.driver import Hooks
from osprey.tui.moa_dialog import MoaConfigDialog
from osprey.tui.widgets import AnswerRow, UserRow


class TuiRig:
    def __init__(self, tmp_path: Path, server: ModelServer | None = None) -> None:
        self.workspace, self.home = tmp_path / "ws", tmp_path / "home"
        self.workspace.mkdir()
        self.home.mkdir()
        self.server = server
        self.events: list[Event] = []

    def settings_for(self, change: dict[str, Any]) -> Settings:
        base = {"base_url": self.server.base_url} if self.server is not None else {"base_url": "http://127.0.0.1:9/v1"}
        return load_settings(self.workspace, {"approval_policy": "never", "model": "main", **base, **change},
                             {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "k"}, interactive=True)

    def factory(self, hooks: Hooks) -> Session:
        def emit(event: Event) -> None:
            self.events.append(event)
            hooks.emit(event)

        options = SessionOptions(settings=self.settings_for({}).model_copy(update={"retry": RETRY}), interactive=True, extensions=False)
        return Session(options, **{**hooks.kwargs(), "emit": emit})

    def app(self) -> OspreyApp:
        return OspreyApp(self.factory, settings_for=self.settings_for)

    def ends(self) -> list[TaskEnd]:
        return [e for e in self.events if isinstance(e, TaskEnd)]


def _answers(app: OspreyApp) -> list[str]:
    return [entry.text for entry in app.transcript.entries if entry.role == "assistant"]


async def test_moa_shows_progress_and_the_merged_answer(tmp_path: Path) -> None:
    server = models_server({
        "ref-a": [Reply.text("Answer A.")], "ref-b": [Reply.text("Answer B.")], "ref-c": [Reply.error(400, "unknown model ref-c")],
        "agg": [Reply.text("The **merged** answer.")], "main": [Reply.text("Main again.")],
    })
    rig = TuiRig(tmp_path, server)
    (rig.home / "config.toml").write_text(PRESET.format(timeout=30))
    try:
        app = rig.app()
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, app)
            await type_prompt(pilot, app, "/moa Which is best?")
            await until(pilot, lambda: bool(rig.ends()))
            await app.workers.wait_for_complete()
            await pilot.pause()
            shown = notices(app)
            assert "moa: ref-a answered" in shown and "moa: ref-b answered" in shown and "moa: ref-c failed" in shown
            assert "unknown model ref-c" in shown and "agg merges 2 of 3 answers" in shown
            assert _answers(app) == ["The **merged** answer."] and app.query(AnswerRow)
            assert [str(row.text) for row in app.query(UserRow)][-1:] == ["Which is best?"] or any(
                "Which is best?" in entry.text for entry in app.transcript.entries if entry.role == "user")
            assert rig.ends()[-1].outcome == "Completed"
            assert "main" in str(app.query_one("#status").render())
            # The next prompt goes to the session's model, with the mixture's answer in its conversation.
            await type_prompt(pilot, app, "next")
            await until(pilot, lambda: len(rig.ends()) == 2)
            await app.workers.wait_for_complete()
            [request] = of_model(server, "main")
            assert "The **merged** answer." in said(request)
        server.assert_clean()
    finally:
        server.close()


async def test_esc_stops_a_mixture_and_the_model_stays(tmp_path: Path) -> None:
    server = models_server({
        "ref-a": [Reply.hold(0)], "ref-b": [Reply.hold(0)], "ref-c": [Reply.hold(0)], "main": [Reply.text("Main answers.")],
    })
    rig = TuiRig(tmp_path, server)
    (rig.home / "config.toml").write_text(PRESET.format(timeout=30))
    try:
        app = rig.app()
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, app)
            await type_prompt(pilot, app, "/moa Slow question")
            await until(pilot, lambda: server.held >= 3)
            assert app.driver.busy
            await pilot.press("escape")
            await until(pilot, lambda: bool(rig.ends()))
            await app.workers.wait_for_complete()
            assert rig.ends()[-1].outcome == "Stopped" and not app.driver.busy
            server.release()
            session = app.session
            assert session is not None and session.settings.model == "main" and session.provider is not None and session.provider.model == "main"
            await type_prompt(pilot, app, "are you there")
            await until(pilot, lambda: len(rig.ends()) == 2)
            await app.workers.wait_for_complete()
            assert _answers(app)[-1] == "Main answers." and of_model(server, "main") and not of_model(server, "agg")
    finally:
        server.release()
        server.close()


async def test_moa_without_a_preset_says_how_to_add_one(tmp_path: Path) -> None:
    rig = TuiRig(tmp_path)
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/moa anything")
        await app.workers.wait_for_complete()
        await pilot.pause()
        shown = notices(app)
        assert "no Mixture of Agents preset is configured" in shown and "/moa-config" in shown and "[moa.presets.trio]" in shown
        assert not rig.ends() and not app.driver.busy
    assert "moa" in commands.BY_NAME and "moa-config" in commands.BY_NAME


async def _fill(pilot: Any, dialog: MoaConfigDialog, **values: str) -> None:
    for key, value in values.items():
        dialog.query_one(f"#{key}", Input).value = value
    await pilot.pause()


async def _settled(pilot: Any, app: OspreyApp) -> None:
    """The dialog's own work is done (the command that opened it waits for the dialog)."""
    mine = [w for w in app.workers if w.group == "moa-presets"]
    if mine:
        await app.workers.wait_for_complete(mine)
    await pilot.pause()


async def _press(pilot: Any, app: OspreyApp, button: str) -> None:
    """Press a button of the dialog and wait until it says what it did."""
    dialog = app.screen
    assert isinstance(dialog, MoaConfigDialog)
    dialog._say()
    dialog.query_one(f"#{button}", Button).press()
    await until(pilot, lambda: any(_said(dialog)))
    await _settled(pilot, app)


def _said(dialog: MoaConfigDialog) -> tuple[str, str]:
    return str(dialog.query_one("#error").render()), str(dialog.query_one("#said").render())


async def test_moa_config_adds_edits_deletes_and_picks_the_default(tmp_path: Path) -> None:
    rig = TuiRig(tmp_path)
    config = rig.home / "config.toml"
    config.write_text('# my settings\nmax_turns = 40  # enough\n\n[sandbox]\nnetwork = false\n')
    app = rig.app()
    async with app.run_test(size=(140, 50)) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/moa-config")
        await until(pilot, lambda: isinstance(app.screen, MoaConfigDialog) and bool(app.screen.query("#save")))
        dialog = app.screen
        assert isinstance(dialog, MoaConfigDialog)
        await pilot.pause()
        # A bad preset is refused and nothing is written.
        await _fill(pilot, dialog, name="solo", references="only-one", aggregator="agg")
        await _press(pilot, app, "save")
        assert "at least 2 reference models" in _said(dialog)[0]
        assert "moa" not in loads(config.read_text())
        # Added: the first preset is also the default.
        await _fill(pilot, dialog, name="duo", references="m1, m2", aggregator="agg", providers="m2=anthropic", instructions="be brief")
        await _press(pilot, app, "save")
        assert "added duo (the default)" in _said(dialog)[1]
        await _fill(pilot, dialog, name="trio", references="t1 t2 t3", aggregator="agg2")
        await _press(pilot, app, "save")
        data = loads(config.read_text())
        assert data["moa"] == {"default": "duo", "presets": {
            "duo": {"reference_models": ["m1", "m2"], "aggregator": "agg", "providers": {"m2": "anthropic"}, "instructions": "be brief"},
            "trio": {"reference_models": ["t1", "t2", "t3"], "aggregator": "agg2"}}}
        text = config.read_text()
        assert text.startswith("# my settings\nmax_turns = 40  # enough\n") and "[moa.presets.trio]" in text
        table = dialog.query_one(DataTable)
        assert table.row_count == 2
        # Edit: the selected preset fills the form; saving it under its name replaces it.
        table.move_cursor(row=1)  # trio (sorted)
        await _press(pilot, app, "edit")
        assert dialog.query_one("#references", Input).value == "t1, t2, t3"
        await _fill(pilot, dialog, aggregator="agg3")
        await _press(pilot, app, "save")
        assert loads(config.read_text())["moa"]["presets"]["trio"]["aggregator"] == "agg3"
        # Make default.
        table.move_cursor(row=1)
        await _press(pilot, app, "default")
        assert loads(config.read_text())["moa"]["default"] == "trio"
        # Delete (after a confirmation): the default one, so no default is left.
        table.move_cursor(row=1)
        dialog._say()
        dialog.query_one("#delete", Button).press()
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog) and bool(app.screen.query("#yes")))
        app.screen.query_one("#yes", Button).press()
        await until(pilot, lambda: isinstance(app.screen, MoaConfigDialog) and bool(app.screen.query("#save")))
        await _settled(pilot, app)
        moa = loads(config.read_text())["moa"]
        assert moa == {"presets": {"duo": {"reference_models": ["m1", "m2"], "aggregator": "agg", "providers": {"m2": "anthropic"},
                                           "instructions": "be brief"}}}
        assert "no preset is the default now" in _said(dialog)[1]
        assert config.read_text().startswith("# my settings\n") and loads(config.read_text())["sandbox"] == {"network": False}
        await pilot.press("escape")
        await pilot.pause()
    # What was written is a valid configuration that a run reads.
    settings = rig.settings_for({})
    assert set(settings.moa.presets) == {"duo"} and settings.moa.default is None


@pytest.mark.parametrize("preset_name", ["bad name"])
async def test_moa_config_refuses_a_bad_name(tmp_path: Path, preset_name: str) -> None:
    rig = TuiRig(tmp_path)
    app = rig.app()
    async with app.run_test(size=(140, 50)) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/moa-config")
        await until(pilot, lambda: isinstance(app.screen, MoaConfigDialog) and bool(app.screen.query("#save")))
        dialog = app.screen
        assert isinstance(dialog, MoaConfigDialog)
        await _fill(pilot, dialog, name=preset_name, references="a b", aggregator="c")
        await _press(pilot, app, "save")
        assert "give the preset a name" in _said(dialog)[0]
        assert not (rig.home / "config.toml").exists()
