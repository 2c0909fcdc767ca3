"""The TUI's /extensions lists the session's workflows with their scope and whether they run
(why not, and how to trust a project one)."""

from __future__ import annotations

from pathlib import Path

from test_tui import SIZE, TuiRig, notices, rig, started, type_prompt  # noqa: F401 - rig is a fixture

SOURCE = "// Says hello.\nasync function main(osprey) {\n  return 'hello';\n}\n"


async def test_extensions_lists_the_workflows_and_their_trust(rig: TuiRig) -> None:  # noqa: F811
    project = rig.workspace / ".osprey" / "workflows"
    project.mkdir(parents=True)
    (project / "hello.js").write_text(SOURCE)
    own = rig.home / "workflows"
    own.mkdir()
    (own / "mine.js").write_text(SOURCE)
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await type_prompt(pilot, app, "/extensions")
        await app.workers.wait_for_complete()
        await pilot.pause()
        listed = notices(app)
    assert f"workflow hello: {Path(project / 'hello.js')} (project) does not run (inactive, untrusted)" in listed
    assert "osprey extensions trust hello" in listed
    assert f"workflow mine: {own / 'mine.js'} (user) runs" in listed
    assert "workflow deep-research:" in listed and "(bundled) runs" in listed
