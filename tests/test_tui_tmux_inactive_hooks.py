"""`osprey` in a real terminal (tmux) after a trusted project hooks file was edited: its trust is
withdrawn, and the TUI says so (the file, and the command that trusts it again) as it opens,
before any prompt; `/extensions` lists the hooks that do not run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_pane import Tmux, serve

from osprey.testing.model_server import ModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

OSPREY = str(Path(sys.executable).with_name("osprey"))
BLOCK_RM = '[[hooks.PreToolUse]]\nmatcher = "bash"\n[[hooks.PreToolUse.hooks]]\ncommand = "echo no rm here >&2; exit 2"\n'


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    yield from serve(tmp_path)


def flat(text: str) -> str:
    """The text without its whitespace: a long line wraps anywhere on screen."""
    return "".join(text.split())


def test_a_hook_that_lost_its_trust_is_announced_before_any_prompt(tmux: Tmux, model_server: ModelServer,
                                                                   osprey_env: dict[str, str], tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    hooks = workspace / ".osprey" / "hooks.toml"
    hooks.parent.mkdir()
    hooks.write_text(BLOCK_RM)
    trusted = subprocess.run([OSPREY, "extensions", "-C", str(workspace), "trust", "hooks", "--yes"], env=osprey_env,
                             capture_output=True, text=True, timeout=60)
    assert trusted.returncode == 0, trusted.stderr
    hooks.write_text(BLOCK_RM.replace("no rm here", "no rm in this repository"))
    tmux.start("ui", [OSPREY, "-C", str(workspace), "--base-url", model_server.base_url], osprey_env, hold=True)
    warning = flat(f"the hooks in {hooks} do not run (it changed since it was trusted)")
    screen = tmux.wait("ui", lambda s: warning in flat(s) and "· ready" in s, "the warning about the hooks")
    assert flat("review it, then run `osprey extensions trust hooks`") in flat(screen)
    assert "needs approval" not in screen and model_server.request_count == 0  # nothing was asked yet
    tmux.text("ui", "/extensions")
    tmux.keys("ui", "Enter")
    tmux.wait("ui", lambda s: flat(f"hooks not running: {hooks} (inactive, modified)") in flat(s), "/extensions")
    tmux.text("ui", "/quit")
    tmux.keys("ui", "Enter")
    assert "exit-status=0" in tmux.wait("ui", lambda s: "exit-status=" in s, "osprey to exit")
