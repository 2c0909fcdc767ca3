"""`/diff`: tracked changes and new files, in a repository with commits, in one without, and outside
any repository; pilot tests of the TUI, and the command itself run by real bash and git (on the
host and in a sandbox lane)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import require_docker
from homes import lane_home
from test_tui import SIZE, notices, started
from test_tui_commands import JournaledRig, _command

from osprey.tui.widgets import FoldRow, NoticeRow, ToolRow
from osprey.workspace_diff import COMMAND, MAX_NEW_FILE_BYTES, MAX_NEW_FILES, DiffView, read

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]


def git(cwd: Path, *args: str) -> None:
    subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True)


def committed(workspace: Path) -> None:
    """A repository whose first commit holds a.txt and a .gitignore of *.log."""
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("one\ntwo\n")
    (workspace / ".gitignore").write_text("*.log\n")
    git(workspace, "add", "a.txt", ".gitignore")
    git(workspace, "commit", "-qm", "start")


def in_repository(path: Path) -> bool:
    return subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, check=False).returncode == 0


def diff_notes(app: object) -> list[str]:
    return [str(row.render()) for row in app.query(NoticeRow) if str(row.render()).startswith("/diff")]  # type: ignore[attr-defined]


@pytest.fixture
def rig(tmp_path: Path) -> JournaledRig:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return JournaledRig(workspace, home, [])


async def test_diff_shows_a_changed_tracked_file_and_the_new_files(rig: JournaledRig) -> None:
    ws = rig.workspace
    committed(ws)
    (ws / "a.txt").write_text("one\nTWO\n")
    (ws / "notes.md").write_text("first new file\n")
    (ws / "src").mkdir()
    (ws / "src" / "util.py").write_text("def util():\n    return 2\n")
    (ws / "debug.log").write_text("ignored by .gitignore\n")
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/diff")
        [row] = app.query(FoldRow).filter(".diff")
        title, body = str(row.title), str(row.body.render())
        assert "1 file changed" in title and "2 new files" in title, title
        assert "-two" in body and "+TWO" in body
        assert " new: notes.md" in body and " new: src/util.py" in body
        assert "+++ b/notes.md" in body and "+first new file" in body
        assert "+++ b/src/util.py" in body and "+    return 2" in body
        assert "debug.log" not in body and "ignored" not in body
        assert not app.query(ToolRow) and not diff_notes(app)
        # The transcript (/export) holds the same.
        [entry] = [e for e in app.transcript.entries if e.role == "tool"]
        assert "+first new file" in entry.text and "+TWO" in entry.text


async def test_diff_in_a_repository_with_no_commit_yet(rig: JournaledRig) -> None:
    ws = rig.workspace
    git(ws, "init", "-q")
    (ws / "staged.txt").write_text("staged line\n")
    git(ws, "add", "staged.txt")
    (ws / "loose.txt").write_text("loose line\n")
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/diff")
        [row] = app.query(FoldRow).filter(".diff")
        title, body = str(row.title), str(row.body.render())
        assert "1 file changed" in title and "1 new file" in title, title
        assert "+++ b/staged.txt" in body and "+staged line" in body
        assert "+++ b/loose.txt" in body and "+loose line" in body
        assert not diff_notes(app)


async def test_diff_outside_a_repository_says_so_in_one_line(rig: JournaledRig) -> None:
    if in_repository(rig.workspace):
        pytest.skip("the temporary directory is inside a git repository")
    (rig.workspace / "file.txt").write_text("x\n")
    app = rig.app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await _command(pilot, app, "/diff")
        assert not app.query(FoldRow).filter(".diff")
        [note] = diff_notes(app)
        assert note == "/diff: this workspace is not in a git repository, so there is no diff to show"
        assert "usage" not in notices(app).lower() and "\n" not in note


# -- the command itself, run by real bash and git


def run(cwd: Path, env: dict[str, str] | None = None) -> DiffView:
    proc = subprocess.run(["bash", "-c", COMMAND], cwd=cwd, capture_output=True, text=True, timeout=60, check=False, env=env)
    return read(proc.stdout + proc.stderr, exit_code=proc.returncode, ok=proc.returncode == 0, error_category=None)


def test_new_files_are_bounded_in_count_and_size(tmp_path: Path) -> None:
    committed(tmp_path)
    for i in range(MAX_NEW_FILES + 7):
        (tmp_path / f"n{i:03d}.txt").write_text(f"content {i}\n")
    (tmp_path / "aaa-big.bin").write_bytes(b"z" * (MAX_NEW_FILE_BYTES + 1))
    view = run(tmp_path)
    assert view.title == f"git diff  {MAX_NEW_FILES + 8} new files", view
    assert f" new: aaa-big.bin ({MAX_NEW_FILE_BYTES + 1} bytes, not shown)" in view.body and "zzzz" not in view.body
    assert view.body.count(" new: ") == MAX_NEW_FILES and view.body.count("new file mode") == MAX_NEW_FILES - 1
    assert f" ... and 8 more new files (only the first {MAX_NEW_FILES} are listed)" in view.body
    assert "+content 0\n" in view.body and "content 56" not in view.body


def test_from_a_subdirectory_the_whole_repository_is_shown(tmp_path: Path) -> None:
    committed(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "top.txt").write_text("at the top\n")
    (tmp_path / "sub" / "low.txt").write_text("below\n")
    view = run(tmp_path / "sub")
    assert view.title == "git diff  2 new files"
    assert "+++ b/top.txt" in view.body and "+++ b/sub/low.txt" in view.body


def test_a_workspace_git_setting_starts_no_program(tmp_path: Path) -> None:
    committed(tmp_path)
    (tmp_path / "a.txt").write_text("changed\n")
    (tmp_path / "b.txt").write_text("new\n")
    git(tmp_path, "config", "diff.external", f"touch {tmp_path}/pwned;")
    git(tmp_path, "config", "core.fsmonitor", f"touch {tmp_path}/pwned-too;")
    view = run(tmp_path)
    assert "+changed" in view.body and "+new" in view.body
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned-too").exists()


def test_without_git_it_says_so(tmp_path: Path) -> None:
    bash = subprocess.run(["bash", "-c", "command -v bash"], capture_output=True, text=True, check=True).stdout.strip()
    proc = subprocess.run([bash, "-c", COMMAND], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": str(tmp_path / "nowhere")})
    view = read(proc.stdout, exit_code=proc.returncode, ok=proc.returncode == 0, error_category=None)
    assert view == DiffView(note="/diff: git is not installed where the session's commands run", level="error")


def test_a_failure_or_a_refusal_is_one_note() -> None:
    assert read("fatal: bad object HEAD", exit_code=128, ok=False, error_category="exit_status").note == "/diff: git failed (exit 128): fatal: bad object HEAD"
    assert read("Error (denied): no", exit_code=None, ok=False, error_category="denied").note == "/diff: Error (denied): no"
    assert read("", exit_code=None, ok=False, error_category="cancelled").note == "/diff: stopped before git finished"
    assert read("something else", exit_code=0, ok=True, error_category=None).level == "error"


async def test_the_command_runs_in_a_lane(workspace: Path) -> None:
    require_docker()
    committed(workspace)
    (workspace / "a.txt").write_text("one\nTWO\n")
    (workspace / "made in the lane.txt").write_text("new here\n")
    async with lane_home([str(workspace)]) as home:
        r = await home.client.bash(COMMAND, timeout_ms=30_000)
    view = read(r.output, exit_code=r.exit_code, ok=r.exit_code == 0, error_category=None)
    assert "1 file changed" in view.title and "1 new file" in view.title, view
    assert "+TWO" in view.body and "+++ b/made in the lane.txt" in view.body and "+new here" in view.body
