"""Workflows in the terminal UI: `/run PATH` starts one and its result reaches the model, `/workflows`
shows the runs with their agents' progress, a discovered workflow is `/NAME` (over a skill of that
name; built-in commands over both), quitting interrupts active runs, and `[workflows] enabled = false`
removes every workflow command. The model is a scripted provider; the agents are real child sessions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from session_harness import text
from test_tui import SIZE, TuiRig, notices, started, type_prompt, until

from osprey.events import TaskEnd
from osprey.messages import ModelRequest, ModelTurn
from osprey.tui import commands
from osprey.tui.app import OspreyApp
from osprey.tui.completion import CompletionMenu
from osprey.tui.widgets import PromptArea, UserRow

HELLO = """// Ask one agent about the arguments and return what it said.
async function main(osprey) {
  osprey.log("asking about " + osprey.args);
  const answer = await osprey.agent({ prompt: "Say hi about " + osprey.args });
  return { said: answer.text, outcome: answer.outcome, argv: osprey.argv };
}
"""

PAIR = """// Two agents at once.
async function main(osprey) {
  osprey.log("starting the pair");
  const [a, b] = await Promise.all([osprey.agent({ prompt: "first" }), osprey.agent({ prompt: "second" })]);
  return a.text + " + " + b.text;
}
"""


def skill(root: Path, name: str, description: str, body: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n\n{body}\n")


def gate(opened: asyncio.Event, answer: str) -> Any:
    """A scripted turn that waits for `opened`, then answers `answer`."""
    async def step(request: ModelRequest) -> ModelTurn:
        await opened.wait()
        return text(answer)

    return step


def lead_ends(rig: TuiRig) -> list[TaskEnd]:
    return [e for e in rig.ends() if e.agent_id is None]


def toasts(app: OspreyApp) -> str:
    return "\n".join(str(n.message) for n in app._notifications)


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    (home / "workflows").mkdir(parents=True)
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "hello.js").write_text(HELLO)
    (flows / "pair.js").write_text(PAIR)
    return TuiRig(workspace, home, [], policy="never")


async def test_run_starts_a_workflow_and_its_result_reaches_the_model(rig: TuiRig) -> None:
    rig.scripts.append([text("hi from the agent"), text("a short summary")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/run ../flows/hello.js the parser")
        await until(pilot, lambda: bool(lead_ends(rig)))
        shown = notices(app)
        assert "workflow hello started" in shown and "workflow hello" in shown and "done" in shown
        [provider] = rig.providers
        child, lead = provider.requests
        assert "Say hi about the parser" in child.messages[-1].model_dump_json()
        sent = lead.messages[-1].model_dump_json()
        assert '<workflow-result name=\\"hello\\">' in sent and "hi from the agent" in sent and "Completed" in sent
        assert '\\"parser\\"' in sent  # osprey.argv
        assert app.query(UserRow).last().text.startswith("/run ../flows/hello.js the parser")
        await type_prompt(pilot, app, "/run ../flows/missing.js")
        await until(pilot, lambda: "there is no file" in notices(app))
        await type_prompt(pilot, app, "/run ../flows")
        await until(pilot, lambda: "is not a workflow" in notices(app))
    assert len(rig.providers[0].requests) == 2


async def test_an_untrusted_project_workflow_does_not_run(rig: TuiRig) -> None:
    project = rig.workspace / ".osprey" / "workflows"
    project.mkdir(parents=True)
    (project / "mine.js").write_text(HELLO)
    rig.scripts.append([])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/run .osprey/workflows/mine.js x")
        await until(pilot, lambda: "does not run" in notices(app))
        assert "osprey extensions trust mine" in notices(app)
        await type_prompt(pilot, app, "/mine x")  # not runnable, so not a command; the reason is given
        await until(pilot, lambda: "unknown command /mine" in toasts(app))
        assert "trust" in toasts(app)
    assert rig.providers[0].requests == []


async def test_the_workflows_view_shows_each_agents_progress(rig: TuiRig) -> None:
    opened = asyncio.Event()
    rig.scripts.append([gate(opened, "one"), gate(opened, "two"), text("summary")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/workflows")
        await until(pilot, lambda: app.screen.__class__.__name__ == "WorkflowsView")
        assert "No workflow has run" in app.screen.shown
        await pilot.press("escape")
        await type_prompt(pilot, app, "/run ../flows/pair.js")
        await until(pilot, lambda: len(rig.providers[0].requests) == 2)  # both agents are waiting on the model
        await type_prompt(pilot, app, "/workflows")
        await until(pilot, lambda: app.screen.__class__.__name__ == "WorkflowsView")
        view: Any = app.screen
        await until(pilot, lambda: view.shown.count(": running") >= 2)
        assert "pair (" in view.shown and "0 of 2 agents ended" in view.shown and "log: starting the pair" in view.shown
        opened.set()
        await until(pilot, lambda: "2 of 2 agents ended" in view.shown)  # refreshed while open
        assert ": done" in view.shown or ": completed" in view.shown.lower()
        await pilot.press("escape")
        await until(pilot, lambda: bool(lead_ends(rig)))
        assert "one + two" in rig.providers[0].requests[-1].messages[-1].model_dump_json()


async def test_a_workflow_is_a_command_over_a_skill_and_built_ins_win(rig: TuiRig) -> None:
    (rig.home / "workflows" / "review-rust.js").write_text(HELLO.replace("// Ask one agent", "// Review Rust with one agent"))
    (rig.home / "workflows" / "status.js").write_text(HELLO)
    skills = rig.workspace / ".agents" / "skills"
    skill(skills, "review-rust", "Review Rust changes", "Read the changed Rust files.")
    skill(skills, "status", "A status skill", "Say the status.")
    rig.scripts.append([text("reviewed by the agent"), text("summary")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/help")
        await until(pilot, lambda: "Workflows:" in notices(app))
        listed = notices(app)
        assert "/review-rust [ARGS]" in listed and "Review Rust with one agent" in listed
        assert "/run PATH [ARGS]" in listed and "/deep-research QUESTION" in listed
        assert "/status [ARGS]" not in listed  # a built-in's name
        area = app.query_one(PromptArea)
        area.load_text("/rev")
        await until(pilot, lambda: app.query_one(CompletionMenu).shown)
        assert [c.name for c in app.query_one(CompletionMenu).found] == ["review-rust"]
        area.clear()
        await type_prompt(pilot, app, "/status")
        await until(pilot, lambda: "approval policy: never" in notices(app))
        await type_prompt(pilot, app, "/review-rust the parser")
        await until(pilot, lambda: bool(lead_ends(rig)))
        requests = rig.providers[0].requests
        assert "Say hi about the parser" in requests[0].messages[-1].model_dump_json()  # the workflow's agent, not the skill
        assert "Read the changed Rust files." not in "".join(r.model_dump_json() for r in requests)
        assert "workflow review-rust started" in notices(app)
        assert len(requests) == 2


async def test_quitting_interrupts_an_active_run(rig: TuiRig) -> None:
    opened = asyncio.Event()
    rig.scripts.append([gate(opened, "never")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        session = app.session
        assert session is not None
        runs: Any = session.workflows
        await type_prompt(pilot, app, "/run ../flows/hello.js x")
        await until(pilot, lambda: len(rig.providers[0].requests) == 1)
        [run] = runs.active()
        await type_prompt(pilot, app, "/quit")
        await until(pilot, lambda: run.status != "running")
    assert run.status == "interrupted"
    result = await asyncio.wait_for(run.result(), 5)
    assert result.status == "interrupted"
    assert any(getattr(e, "status", None) == "interrupted" and "workflow" in e.type for e in rig.events), [e.type for e in rig.events]


async def test_disabled_workflows_remove_the_commands(rig: TuiRig) -> None:
    (rig.home / "config.toml").write_text("[workflows]\nenabled = false\n")
    (rig.home / "workflows" / "review-rust.js").write_text(HELLO)
    skill(rig.workspace / ".agents" / "skills", "review-rust", "Review Rust changes", "Read the changed Rust files.")
    rig.scripts.append([text("reviewed by the skill")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert app.session is not None and app.session.workflows is None
        for line in ("/run ../flows/hello.js", "/workflows", "/deep-research what is a workflow"):
            await type_prompt(pilot, app, line)
            name = line.split()[0]
            await until(pilot, lambda name=name: f"unknown command {name}" in toasts(app))
        await type_prompt(pilot, app, "/help")
        await until(pilot, lambda: "/copy [all]" in notices(app))
        listed = notices(app)
        assert "/run" not in listed and "/workflows" not in listed and "/deep-research" not in listed and "Workflows:" not in listed
        menu = app.query_one(CompletionMenu)
        area = app.query_one(PromptArea)
        area.load_text("/")
        await until(pilot, lambda: menu.shown)
        names = {c.name for c in menu.found}
        assert not names & commands.WORKFLOW_COMMANDS and "review-rust" not in names
        assert menu.complete("/ru") is None and menu.complete("/dee") is None
        area.clear()
        await type_prompt(pilot, app, "/review-rust the parser")  # the skill of that name runs
        await until(pilot, lambda: bool(lead_ends(rig)))
        assert "Read the changed Rust files." in rig.providers[0].requests[0].messages[-1].model_dump_json()


def test_the_run_argument_and_the_result_text() -> None:
    from osprey.tui.slash import MAX_RESULT_CHARS, first_word, result_text

    assert first_word('"my flows/a.js" the  parser') == ("my flows/a.js", "the  parser")
    assert first_word("  a.js \"q r\" s ") == ("a.js", '"q r" s')
    assert first_word("") == ("", "")
    with pytest.raises(ValueError, match="no closing quotation mark"):
        first_word("'a.js")
    assert result_text("a report") == "a report"
    assert result_text(None) == "(the workflow returned nothing)"
    assert result_text({"n": 1}) == '{\n  "n": 1\n}'
    long = result_text("x" * (MAX_RESULT_CHARS + 5))
    assert long.endswith("[cut: 5 more characters]") and len(long) < MAX_RESULT_CHARS + 40


async def test_deep_research_runs_the_bundled_workflow_whatever_shares_its_name(rig: TuiRig) -> None:
    from osprey.agents.workflows.discovery import BUNDLED
    from osprey.events import WorkflowStart

    (rig.home / "config.toml").write_text('[web_search]\nsearxng_url = "http://127.0.0.1:9"\n')
    (rig.home / "workflows" / "deep-research.js").write_text("// My own research.\nasync function main(osprey) { return 'mine'; }\n")
    opened = asyncio.Event()
    rig.scripts.append([gate(opened, "never")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/deep-research what is a workflow")
        await until(pilot, lambda: any(isinstance(e, WorkflowStart) for e in rig.events))
        [start] = [e for e in rig.events if isinstance(e, WorkflowStart)]
        assert start.path == str(BUNDLED / "deep-research.js") and start.scope == "bundled"
        assert "was not found" not in notices(app)
        await until(pilot, lambda: len(rig.providers[0].requests) == 1)  # the bundled planner asks the model
        assert "what is a workflow" in rig.providers[0].requests[0].messages[-1].model_dump_json()
        await type_prompt(pilot, app, "/quit")


async def test_the_command_menu_drops_bidi_overrides_of_a_description(rig: TuiRig) -> None:
    (rig.home / "workflows" / "sly.js").write_text("// Looks \u202eharmless\u202c here\n" + HELLO)
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/help")
        await until(pilot, lambda: "Workflows:" in notices(app))
        assert "\u202e" not in notices(app)
        menu = app.query_one(CompletionMenu)
        app.query_one(PromptArea).load_text("/sl")
        await until(pilot, lambda: menu.shown and [c.name for c in menu.found] == ["sly"])
        shown = str(menu.get_option_at_index(0).prompt)
        assert "Looks harmless here" in shown and "\u202e" not in shown and "\u202c" not in shown
