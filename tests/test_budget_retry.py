"""`osprey agent --budget` (BudgetExpired, usage kept) and Retry-After on retryable model errors,
end to end: the real command against the loopback model server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from osprey.providers.base import retry_after
from osprey.testing.model_server import ModelServer, Reply

RUN_TIMEOUT = 120


def run(server: ModelServer, workspace: Path, home: Path, *flags: str, prompt: str = "Do it.") -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}
    env.update(OSPREY_HOME=str(home), OPENAI_API_KEY="test-key")
    proc = subprocess.run([sys.executable, "-m", "osprey", "agent", "-C", str(workspace), "--provider", "openai", "--model", "m",
                           "--base-url", server.base_url, "--yolo", *flags, prompt], env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    return proc, [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return workspace, home


def test_a_budget_that_runs_out_ends_budget_expired_with_the_usage_so_far(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    with ModelServer([Reply.tool_call("bash", {"command": "echo one"}, usage=(10, 5)),
                      Reply.delay(60, Reply.text("too late"))]) as server:
        started = time.monotonic()
        proc, events = run(server, workspace, home, "--budget", "3s")
        elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    end = events[-1]
    assert (end["type"], end["outcome"], end["exit_status"]) == ("session_end", "BudgetExpired", 1)
    assert end["error"] == "the session's time budget of 3 s ran out"
    assert end["usage"]["input_tokens"] == 10 and end["usage"]["output_tokens"] == 5
    assert [e["ok"] for e in events if e["type"] == "tool_result"] == [True]
    assert elapsed < 60  # it did not wait for the held reply


@pytest.mark.parametrize("text", ["0", "5x", "abc", "-3"])
def test_bad_budgets_are_usage_errors(dirs: tuple[Path, Path], text: str) -> None:
    workspace, home = dirs
    with ModelServer() as server:
        proc, _ = run(server, workspace, home, "--budget", text)
    assert proc.returncode == 2 and "--budget" in proc.stderr


def test_a_429_with_retry_after_is_retried_when_the_server_asked(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    with ModelServer([Reply.error(429, "slow down", headers={"Retry-After": "0.2"}), Reply.text("done")]) as server:
        proc, events = run(server, workspace, home)
    assert proc.returncode == 0, proc.stderr
    notices = [e["message"] for e in events if e["type"] == "notice"]
    assert any("retrying the model request in 0.2 s, as the server asked (retry 1 of 3)" in n for n in notices), notices
    assert events[-1]["final_text"] == "done"


def test_a_retry_after_past_the_turn_deadline_ends_the_run_at_once(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    (home / "config.toml").write_text("[retry]\nturn_timeout = 20\n")
    with ModelServer([Reply.error(429, "come back in an hour", headers={"Retry-After": "3600"}), Reply.text("never")]) as server:
        started = time.monotonic()
        proc, events = run(server, workspace, home)
        elapsed = time.monotonic() - started
        asked = len(server.requests)
    assert proc.returncode == 1
    end = events[-1]
    assert end["outcome"] == "Error" and "asked to wait 3600 s, past this turn's 20 s deadline" in end["error"]
    assert asked == 1 and elapsed < 20


def test_retry_after_values() -> None:
    assert retry_after(None) is None and retry_after("") is None and retry_after("soon") is None
    assert retry_after("7") == 7.0 and retry_after("-5") == 0.0 and retry_after("99999") == 3600.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after("nan") is None
