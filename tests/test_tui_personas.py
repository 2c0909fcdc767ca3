"""The terminal UI's personas: /agents NAME switches from the next turn, /agents opens a picker of
the project and user personas and the bundled default and coding, a persona with an output
contract is refused, and the status line names the persona."""

from __future__ import annotations

from pathlib import Path

import pytest
from session_harness import text
from test_tui import SIZE, TuiRig, notices, started, type_prompt, until
from textual.widgets import OptionList

from osprey.events import PersonaSwitch
from osprey.tui.screens import PersonaPicker


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    personas = workspace / ".osprey" / "personas"
    personas.mkdir(parents=True)
    (personas / "reviewer.md").write_text("---\nname: reviewer\ndescription: Reviews without editing\n---\n\nReview carefully.\n")
    return TuiRig(workspace, home, [])


async def test_agents_name_switches_the_persona_from_the_next_turn(rig: TuiRig) -> None:
    rig.scripts.append([text("first"), text("second")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/agents coding")
        await until(pilot, lambda: "persona is coding" in notices(app))
        assert [e.persona for e in rig.events if isinstance(e, PersonaSwitch)] == ["coding"]
        assert "coding · " in str(app.query_one("#status").render())
        await type_prompt(pilot, app, "hello")
        await until(pilot, lambda: len(rig.ends()) == 1)
        [request] = rig.providers[0].requests
        assert "# Persona: coding" in request.system
        await type_prompt(pilot, app, "/agents architect")
        await until(pilot, lambda: "/agents: " in notices(app))
        assert "output contract" in notices(app)
        await type_prompt(pilot, app, "/agents nobody")
        await until(pilot, lambda: "nobody" in notices(app))
        assert "coding · " in str(app.query_one("#status").render())  # a failed switch keeps the persona


async def test_agents_opens_a_picker_and_enter_picks(rig: TuiRig) -> None:
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/agents")
        await until(pilot, lambda: isinstance(app.screen, PersonaPicker))
        options = app.screen.query_one(OptionList)
        listed = [str(options.get_option_at_index(n).id) for n in range(options.option_count)]
        assert listed == ["reviewer", "default", "coding"]
        await pilot.press("enter")  # the first: the project's reviewer
        await until(pilot, lambda: "persona is reviewer" in notices(app))
        await type_prompt(pilot, app, "/agents")
        await until(pilot, lambda: isinstance(app.screen, PersonaPicker))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, PersonaPicker))
        assert [e.persona for e in rig.events if isinstance(e, PersonaSwitch)] == ["reviewer"]


def test_a_session_resumed_from_the_tui_goes_on_as_its_recorded_persona(tmp_path: Path) -> None:
    from osprey.config import load_settings
    from osprey.events import SessionStart
    from osprey.session.core import SessionOptions
    from osprey.sessions.journal import SessionRow
    from osprey.tui.driver import Resume
    from osprey.tui.launch import Launch, session_options

    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    settings = load_settings(workspace, {}, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "x"}, interactive=True)
    plan = Launch(options=SessionOptions(settings=settings), settings_for=lambda _: settings, journal=home / "sessions.db")
    row = SessionRow(id="abc123def456", cwd=str(workspace), workspace=str(workspace), title="t", provider="openai", model="m",
                     created=0.0, updated=0.0)
    start = SessionStart(session_id=row.id, provider="openai", model="m", cwd=str(workspace), tool_service="local", tools=[],
                         approval_policy="on-request", max_turns=5, persona="default")
    switched = PersonaSwitch(persona="coding")
    options = session_options(plan, settings, "new-id", Resume(row, [start, switched]))
    assert options.persona is not None and options.persona.name == "coding" and options.session_id == row.id
    gone = PersonaSwitch(persona="no-longer-there")
    assert session_options(plan, settings, "new-id", Resume(row, [start, gone])).persona is None  # the launch's
    assert session_options(plan, settings, "new-id", None).persona is None
