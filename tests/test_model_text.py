"""Whatever a model sends cannot end a session: half an emoji (a lone UTF-16 surrogate) in text
or tool arguments, a tool call without a name. Real `osprey agent` runs against the loopback
model server, in both wire formats; the server's protocol checks must stay clean."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from test_e2e_agent import agent, check_stream

from osprey.events import AssistantText, ToolCallEvent
from osprey.render import JsonlWriter, TerminalRenderer
from osprey.testing.model_server import ModelServer, Reply

pytestmark = pytest.mark.e2e

HALF_EMOJI = "\ud83d"


@pytest.fixture(params=["openai", "anthropic"])
def dialect(request: pytest.FixtureRequest) -> str:
    return request.param


def test_a_lone_surrogate_in_text_and_arguments_does_not_end_the_session(dialect: str, workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    (workspace / "notes.txt").write_text("hello\n")
    model_server.add(
        Reply.tool_call("grep", {"pattern": f"hello|{HALF_EMOJI}"}, text=f"Looking {HALF_EMOJI}"),
        Reply.tool_call("read_file", {"path": f"{HALF_EMOJI}.txt"}),
        Reply.text(f"Done {HALF_EMOJI} here."),
    )
    run = agent(osprey_env, workspace, model_server, dialect)
    assert run.rc == 0, run
    events = check_stream(run)
    end = events[-1]
    assert end["outcome"] == "Completed" and end["final_text"] == "Done \ufffd here.", end
    grep_call, read_call = run.of("tool_call")
    assert grep_call["arguments"]["pattern"] == "hello|\ufffd"
    assert run.result_of("grep")["ok"], run.result_of("grep")
    assert (run.result_of("read_file")["ok"], run.result_of("read_file")["error_category"]) == (False, "not_found")


def test_a_tool_call_without_a_name_is_an_error_result(dialect: str, workspace: Path, model_server: ModelServer, osprey_env: dict[str, str]) -> None:
    model_server.add(Reply.tool_call("", {"path": "x"}), Reply.text("Sorry."))
    run = agent(osprey_env, workspace, model_server, dialect)
    assert run.rc == 0, run
    [result] = run.of("tool_result")
    assert (result["ok"], result["error_category"]) == (False, "invalid_arguments"), result
    assert "no tool name" in result["output"] and "read_file" in result["output"]
    # The follow-up request carried the call with a valid name (the fixture checks the protocol).
    assert model_server.request_count == 2


def test_the_jsonl_writer_never_raises_on_unencodable_text() -> None:
    out = io.StringIO()
    writer = JsonlWriter(out)
    writer(AssistantText(turn=1, text=f"a{HALF_EMOJI}b"))
    writer(ToolCallEvent(turn=1, id="c", name="bash", arguments={"command": HALF_EMOJI}))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["text"] == "a\ufffdb" and lines[1]["arguments"]["command"] == "\ufffd"


def test_the_terminal_renderer_never_raises_on_unencodable_text() -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    renderer = TerminalRenderer(out, out, color=False)
    renderer.text(f"x{HALF_EMOJI}")
    renderer(AssistantText(turn=1, text=f"x{HALF_EMOJI}"))
    out.flush()
    assert raw.getvalue().startswith(b"x?")


def test_the_terminal_never_receives_control_sequences_from_a_model_or_a_file() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, out, color=False)
    clipboard = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
    renderer(AssistantText(turn=1, text="hello\x1b[2J\rworld"))
    renderer.text(f"hi{clipboard}")
    renderer(ToolCallEvent(turn=1, id="c", name="bash\x1b[31m", arguments={"command": "cat x"}))
    from osprey.events import ToolResultEvent

    renderer(ToolResultEvent(turn=1, id="c", name="bash", ok=True, output=f"line{clipboard}\nnext\x9b2J"))
    shown = out.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown and "\r" not in shown, repr(shown)
    assert "hello" in shown and "world" in shown and "next" in shown
