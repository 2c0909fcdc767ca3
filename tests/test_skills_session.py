"""Skills in sessions: `osprey agent` lists the discovered skills in the system prompt, `load_skill`
runs under the headless default policy, `--skill` preloads (an unknown one stops the run naming the
skills there are), `--skill-dir` and OSPREY_SKILL_DIR add roots after the project's and before the
user's; the terminal UI's /skills, /skill NAME, /NAME and /bug-report."""

from __future__ import annotations

from pathlib import Path

import pytest
from session_harness import text
from test_judgement_e2e import Dirs, Run, assert_ended, git_dirs, run_agent, told
from test_tui import SIZE, TuiRig, notices, started, type_prompt, until

from osprey.testing.model_server import ModelServer, Reply
from osprey.tui.widgets import UserRow

SKILL = "---\nname: {name}\ndescription: >-\n  {description}\n  on two lines.\nlicense: MIT\n---\n\n{body}\n"


def skill(root: Path, name: str, description: str, body: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL.format(name=name, description=description, body=body))
    return folder


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    return git_dirs(tmp_path)


def agent(server: ModelServer, dirs: Dirs, *flags: str, env: dict[str, str] | None = None, prompt: str = "Review it.") -> Run:
    return run_agent(server, dirs, "--events-jsonl", *flags, prompt=prompt, env=env, timeout=90)


@pytest.mark.e2e
def test_skills_are_listed_and_load_skill_runs_under_the_default_policy(dirs: Dirs) -> None:
    skill(dirs.workspace / ".agents" / "skills", "review-rust", "Review Rust changes for correctness", "Read the changed Rust files.")
    with ModelServer([Reply.tool_call("load_skill", {"name": "review-rust"}), Reply.text("reviewed")]) as server:
        run = agent(server, dirs)
        requests = server.requests
    assert_ended(run, "Completed", 0, final_text="reviewed")
    system = str(requests[0].body["messages"][0]["content"])
    assert "- review-rust: Review Rust changes for correctness on two lines." in system
    assert "- about-osprey:" in system and "- bug-report:" in system
    [result] = told(requests[1])
    assert "Read the changed Rust files." in result["content"] and "license: MIT" not in result["content"]


@pytest.mark.e2e
def test_skill_preloads_and_an_unknown_one_stops_the_run(dirs: Dirs) -> None:
    skill(dirs.workspace / ".agents" / "skills", "review-rust", "Review Rust changes", "Report findings with exact locations.")
    with ModelServer([Reply.text("ok")]) as server:
        run = agent(server, dirs, "--skill", "review-rust")
        [request] = server.requests
    assert_ended(run, "Completed", 0, final_text="ok")
    assert "Report findings with exact locations." in str(request.body["messages"][0]["content"])
    with ModelServer([]) as server:
        missing = agent(server, dirs, "--skill", "review-go")
    assert missing.rc == 1 and "review-go" in missing.stderr and "review-rust" in missing.stderr, missing


@pytest.mark.e2e
def test_skill_dirs_come_after_the_project_and_before_the_user(dirs: Dirs, tmp_path: Path) -> None:
    flag_root, env_root = tmp_path / "team-skills", tmp_path / "env-skills"
    skill(dirs.workspace / ".agents" / "skills", "shared", "From the project", "project body")
    skill(flag_root, "shared", "From the flag", "flag body")
    skill(flag_root, "team-only", "From the flag dir", "team body")
    skill(env_root, "env-only", "From OSPREY_SKILL_DIR", "env body")
    skill(env_root, "team-only", "Shadowed by the flag", "never")
    skill(dirs.home / "skills", "env-only", "Shadowed by the env dir", "never")
    skill(dirs.home / "skills", "mine", "From the user root", "user body")
    with ModelServer([Reply.text("ok")]) as server:
        run = agent(server, dirs, "--skill-dir", str(flag_root), env={"OSPREY_SKILL_DIR": str(env_root)})
        [request] = server.requests
    assert run.rc == 0, run
    system = str(request.body["messages"][0]["content"])
    for line in ("- shared: From the project", "- team-only: From the flag dir", "- env-only: From OSPREY_SKILL_DIR", "- mine: From the user root"):
        assert line in system, line
    assert "Shadowed" not in system and "From the flag on" not in system


@pytest.fixture
def rig(tmp_path: Path) -> TuiRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".git").mkdir(parents=True)
    home.mkdir()
    skill(workspace / ".agents" / "skills", "review-rust", "Review Rust changes", "Read the changed Rust files.")
    return TuiRig(workspace, home, [])


async def test_the_tui_lists_shows_and_runs_skills(rig: TuiRig) -> None:
    rig.scripts.append([text("reviewed"), text("filed")])
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/skills")
        await until(pilot, lambda: "skills (load_skill NAME" in notices(app))
        listed = notices(app)
        assert "review-rust (project)" in listed and "about-osprey (bundled)" in listed
        await type_prompt(pilot, app, "/skill review-rust")
        await until(pilot, lambda: "scope: project" in notices(app))
        assert str(rig.workspace / ".agents" / "skills" / "review-rust" / "SKILL.md") in notices(app)
        await type_prompt(pilot, app, "/skill nothing")
        await until(pilot, lambda: "no skill is named 'nothing'" in notices(app))
        await type_prompt(pilot, app, "/review-rust the parser change")
        await until(pilot, lambda: len(rig.ends()) == 1)
        sent = rig.providers[0].requests[0].messages[-1].model_dump_json()
        assert "Read the changed Rust files." in sent and "the parser change" in sent
        assert app.query(UserRow).last().text.startswith("/review-rust the parser change")
        await type_prompt(pilot, app, "/bug-report the status line is wrong")
        await until(pilot, lambda: len(rig.ends()) == 2)
        sent = rig.providers[0].requests[1].messages[-1].model_dump_json()
        assert "bug-report" in sent and "confirm" in sent.lower() and "the status line is wrong" in sent
