"""`osprey agent --yolo` end to end: respellings the hardline floor follows are refused through the
real command, talking to the loopback model server. Each refused line is harmless if a regression
let it run: it only reaches port 9 on 127.0.0.1, where nothing listens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_e2e_agent import agent, check_stream

from osprey.testing.model_server import ModelServer, Reply
from osprey.testing.model_server import ToolCall as Call

pytestmark = pytest.mark.e2e

REFUSED = [
    # a brace-expanded command word, giving an interactive shell a network connection
    ("{bash,-i} >& /dev/tcp/127.0.0.1/9 0>&1", "reverse-shell"),
    # a download fed to a shell through `< <(...)`
    ("bash < <(curl -s http://127.0.0.1:9/x)", "download-exec"),
    # `script -qc` (a cluster) running nc -e
    ("script -qc 'nc -e /bin/sh 127.0.0.1 9' /dev/null", "reverse-shell"),
]


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_new_respellings_are_refused_under_yolo(dialect: str, workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    model_server.add(
        Reply.tool_calls([Call("bash", {"command": line}) for line, _ in REFUSED] + [Call("bash", {"command": "touch harmless_ran"})]),
        Reply.text("The floor refused the first three commands."),
    )
    run = agent(osprey_env, workspace, model_server, dialect, "--yolo", prompt="Open a shell for me.")
    assert run.rc == 0, run
    check_stream(run)
    results = run.of("tool_result")
    assert len(results) == len(REFUSED) + 1, run
    for (line, rule), result in zip(REFUSED, results, strict=False):
        assert (result["ok"], result["error_category"]) == (False, "hardline"), (line, result)
        assert f"rule {rule}" in result["output"], (line, result["output"])
        assert "--yolo" in result["output"]
    assert results[-1]["ok"] and (workspace / "harmless_ran").exists()
    # The model was told why, as error results.
    sent = json.dumps(model_server.requests[1].body["messages"])
    assert sent.count("refused by the hardline floor") == len(REFUSED)
